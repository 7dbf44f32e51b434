#!/usr/bin/env python3
"""Stands in for systemd's notify socket in tests.

    notify_listener.py SOCKET LOG READY_FILE

Binds an AF_UNIX datagram socket at SOCKET (a leading '@' means the abstract namespace,
as in NOTIFY_SOCKET), asks the kernel for each sender's credentials (SO_PASSCRED, as
systemd does) and appends one JSON object a line to LOG for every assignment received:
{"t": monotonic seconds at arrival, "pid": the sender's pid, "msg": "READY=1"}. It
creates READY_FILE once bound, so that the test starts the daemons only then (a message
sent before would be lost), and runs until it is killed.
"""
import json
import socket
import struct
import sys
import time


def main() -> int:
    path, log_path, ready_path = sys.argv[1:4]
    address = "\0" + path[1:] if path.startswith("@") else path
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.bind(address)
    cred_size = struct.calcsize("iII")
    with open(log_path, "a", buffering=1) as log:
        open(ready_path, "w").close()
        while True:
            data, ancillary, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(cred_size))
            now = time.monotonic()
            pid = None
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iII", payload[:cred_size])[0]
            # One datagram may carry several newline-separated assignments.
            for line in data.decode("utf-8", "replace").split("\n"):
                if line:
                    log.write(json.dumps({"t": now, "pid": pid, "msg": line}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
