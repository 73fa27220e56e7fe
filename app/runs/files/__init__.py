"""What a run leaves on disk and in the store: its log, output, images, checkpoints' records,
working-directory files, disk use and the offsets ingest keeps."""
