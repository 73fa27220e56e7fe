"""The composition root: what puts the server (`app`) and the host agent (`worker`) together on
one machine for `torchyard up`, and the only package that imports both.

app never imports the worker and the worker changes data only through app's services, so
neither can hold the place that wires them: the API of a machine that keeps run directories
(`api.create_app`: app's factory with this host's jobs given to the reaper), the processes
`up` starts (`processes`), their supervisor and the API's spare (`supervisor`, `standby`), and
the server-side commands' work (`stack`, `admin`). The client CLI (torchyard.cli) reaches these
only inside its server commands, after checking that the server extra is installed.
"""
