#!/usr/bin/env python3
"""A TCP bulk flow for bench/tcp_fairness.sh: `serve PORT SECONDS` counts what
arrives for SECONDS after the first byte and prints MB/s; `send HOST PORT
SECONDS [ALGORITHM]` writes as fast as the socket takes for SECONDS, with
that TCP congestion control (default cubic, Linux's default; a host may set
another, e.g. bbr, in net.ipv4.tcp_congestion_control), and prints the one used."""
import socket
import sys
import time


def serve(port, seconds):
    with socket.create_server(("0.0.0.0", port)) as listener:
        conn, _ = listener.accept()
        with conn:
            received = 0
            data = conn.recv(1 << 16)
            start = time.monotonic()
            while data and time.monotonic() - start < seconds:
                received += len(data)
                data = conn.recv(1 << 16)
            elapsed = time.monotonic() - start
    print("tcp %.1f MB/s" % (received / elapsed / 1e6))


def send(host, port, seconds, algorithm):
    chunk = b"\0" * (1 << 16)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, algorithm.encode())
    s.connect((host, port))
    used = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
    print("tcp-congestion-control %s" % used, flush=True)
    with s:
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the receiver stopped counting: done


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), float(sys.argv[3]))
    else:
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
             sys.argv[5] if len(sys.argv) > 5 else "cubic")
