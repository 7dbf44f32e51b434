#!/usr/bin/env python3
"""Stands in for systemd's notify socket in tests.

    notify_listener.py SOCKET LOG READY_FILE

Binds an AF_UNIX datagram socket at SOCKET (a leading '@' means the abstract namespace,
as in NOTIFY_SOCKET), asks the kernel for each sender's credentials (SO_PASSCRED, as
systemd does) and appends one JSON object a line to LOG for every assignment received:
{"t": seconds, "pid": the sender's pid, "msg": "READY=1", "received": seconds}. "t" is
the kernel's timestamp of the datagram (SO_TIMESTAMP), taken when the sender sent it, so
that the gaps between a daemon's messages are the daemon's own even when this listener
runs late on a busy machine; "received" is when the listener read it. It creates
READY_FILE once bound, so that the test starts the daemons only then (a message sent
before would be lost), and runs until it is killed.
"""
import json
import socket
import struct
import sys
import time

# Linux's SO_TIMESTAMP (also the type of its control message), where Python lacks the name.
SO_TIMESTAMP = getattr(socket, "SO_TIMESTAMP", 29)


def main() -> int:
    path, log_path, ready_path = sys.argv[1:4]
    address = "\0" + path[1:] if path.startswith("@") else path
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
    sock.bind(address)
    cred_size = struct.calcsize("iII")
    tv_size = struct.calcsize("qq")
    space = socket.CMSG_SPACE(cred_size) + socket.CMSG_SPACE(tv_size)
    with open(log_path, "a", buffering=1) as log:
        open(ready_path, "w").close()
        while True:
            data, ancillary, _, _ = sock.recvmsg(65536, space)
            received = time.time()
            now = received
            pid = None
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iII", payload[:cred_size])[0]
                elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMP:
                    sec, usec = struct.unpack("qq", payload[:tv_size])
                    now = sec + usec / 1e6
            # One datagram may carry several newline-separated assignments.
            for line in data.decode("utf-8", "replace").split("\n"):
                if line:
                    log.write(json.dumps({"t": now, "pid": pid, "msg": line,
                                          "received": received}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
