"""Says what the job's /etc holds and who the job is with no USER or LOGNAME in its
environment (tests/test_job_network.py)."""

import getpass
import os
import pwd

for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):
    os.environ.pop(name, None)
print(f"ETC {','.join(sorted(os.listdir('/etc')))}", flush=True)
print(f"GETUSER {getpass.getuser()}", flush=True)
entry = pwd.getpwuid(os.getuid())
print(f"PASSWD {entry.pw_name} {entry.pw_uid} {entry.pw_dir}", flush=True)
print(f"PASSWD LINES {len(open('/etc/passwd').read().splitlines())}", flush=True)
