#!/usr/bin/env python3
"""Traffic helpers for braid's end-to-end tests, run inside the testbed's namespaces.

  blob.py serve PORT SIZE        accept one TCP connection, send SIZE pseudo-random bytes
  blob.py sink PORT              accept one TCP connection, read to EOF
  blob.py push HOST PORT SIZE    connect, send SIZE pseudo-random bytes
  blob.py fetch HOST PORT        connect, read to EOF
  blob.py udp-echo PORT          echo UDP datagrams (IPv4 and IPv6) until killed
  blob.py udp-ping HOST PORT N   send N datagrams, print how many echoes came back
  blob.py udp-count PORT SECS    count datagrams per source address for SECS seconds
  blob.py udp-send SRC HOST PORT N  send N datagrams from source address SRC

Senders print "sent BYTES SHA256", receivers "received BYTES SHA256 SECONDS", so a test
compares digests. Listeners print "ready" once bound.
"""
import hashlib
import random
import socket
import sys
import time

CHUNK = 1 << 16


def payload(size):
    return random.Random(size).randbytes(size)


def listen_tcp(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    s.listen(1)
    print("ready", flush=True)
    conn, _ = s.accept()
    return conn


def connect_tcp(host, port):
    for _ in range(50):
        try:
            return socket.create_connection((host, port), timeout=60)
        except OSError:
            time.sleep(0.1)
    return socket.create_connection((host, port), timeout=60)


def send_all(conn, size):
    data = payload(size)
    view = memoryview(data)
    for off in range(0, size, CHUNK):
        conn.sendall(view[off:off + CHUNK])
    conn.shutdown(socket.SHUT_WR)
    conn.recv(1)  # wait for the peer to close: everything was read
    print("sent", size, hashlib.sha256(data).hexdigest(), flush=True)


def receive_all(conn):
    h = hashlib.sha256()
    n = 0
    start = time.monotonic()
    conn.settimeout(120)
    while True:
        b = conn.recv(CHUNK)
        if not b:
            break
        h.update(b)
        n += len(b)
    secs = time.monotonic() - start
    conn.close()
    print("received", n, h.hexdigest(), "%.3f" % secs, flush=True)


def udp_socket(host=None):
    fam = socket.AF_INET6 if host is None or ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    if host is None:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    return s


def main(argv):
    cmd = argv[1]
    if cmd == "serve":
        send_all(listen_tcp(int(argv[2])), int(argv[3]))
    elif cmd == "sink":
        receive_all(listen_tcp(int(argv[2])))
    elif cmd == "push":
        send_all(connect_tcp(argv[2], int(argv[3])), int(argv[4]))
    elif cmd == "fetch":
        receive_all(connect_tcp(argv[2], int(argv[3])))
    elif cmd == "udp-echo":
        s = udp_socket()
        s.bind(("::", int(argv[2])))
        print("ready", flush=True)
        while True:
            data, peer = s.recvfrom(65535)
            s.sendto(data, peer)
    elif cmd == "udp-ping":
        host, port, count = argv[2], int(argv[3]), int(argv[4])
        s = udp_socket(host)
        s.settimeout(0.5)
        got = 0
        for i in range(count):
            msg = b"%d" % i + b"x" * 1000
            s.sendto(msg, (host, port))
            try:
                if s.recvfrom(65535)[0] == msg:
                    got += 1
            except socket.timeout:
                pass
        print("echoed", got, "of", count, flush=True)
    elif cmd == "udp-count":
        s = udp_socket()
        s.bind(("::", int(argv[2])))
        s.settimeout(0.2)
        print("ready", flush=True)
        end = time.monotonic() + float(argv[3])
        counts = {}
        while time.monotonic() < end:
            try:
                _, peer = s.recvfrom(65535)
            except socket.timeout:
                continue
            src = peer[0].removeprefix("::ffff:")
            counts[src] = counts.get(src, 0) + 1
        for src, n in sorted(counts.items()):
            print("from", src, n, flush=True)
        print("done", flush=True)
    elif cmd == "udp-send":
        src, host, port, count = argv[2], argv[3], int(argv[4]), int(argv[5])
        s = udp_socket(host)
        s.bind((src, 0))
        for i in range(count):
            s.sendto(b"%d" % i, (host, port))
            time.sleep(0.01)
        print("sent", count, flush=True)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
