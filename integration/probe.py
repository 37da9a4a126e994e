#!/usr/bin/env python3
"""A constant-rate UDP probe that measures one-way delay and loss.

  probe.py send HOST PORT --kbps 1000 --seconds 10 [--tos 0xb8] [--size 1000]
  probe.py recv PORT --seconds 12 --out FILE.json

The sender stamps every datagram with a sequence number and CLOCK_MONOTONIC, which
every network namespace of a machine shares, so the receiver (in another namespace of
the same machine) reads the one-way delay of each datagram directly. The receiver
writes [[seq, sent_ns, delay_ns], ...] for every datagram it got, and `sent` (the
highest sequence number seen plus one) so that loss can be counted.
"""
import argparse
import json
import socket
import struct
import time

HEADER = struct.Struct("!QQ")  # sequence number, send time (ns, CLOCK_MONOTONIC)


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def send(args):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, args.tos)
    interval = args.size * 8 / (args.kbps * 1000) * 1e9
    padding = bytes(args.size - HEADER.size)
    start = now_ns()
    seq = 0
    while True:
        due = start + int(seq * interval)
        if due - start > args.seconds * 1e9:
            break
        wait = due - now_ns()
        if wait > 0:
            time.sleep(wait / 1e9)
        sock.sendto(HEADER.pack(seq, now_ns()) + padding, (args.host, args.port))
        seq += 1


def recv(args):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", args.port))
    sock.settimeout(0.2)
    end = time.monotonic() + args.seconds
    samples = []
    while time.monotonic() < end:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        arrived = now_ns()
        if len(data) < HEADER.size:
            continue
        seq, sent = HEADER.unpack_from(data)
        samples.append([seq, sent, arrived - sent])
    sent = max((s[0] for s in samples), default=-1) + 1
    with open(args.out, "w") as f:
        json.dump({"sent": sent, "samples": samples}, f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("host")
    s.add_argument("port", type=int)
    s.add_argument("--kbps", type=float, default=1000)
    s.add_argument("--seconds", type=float, default=10)
    s.add_argument("--tos", type=lambda v: int(v, 0), default=0)
    s.add_argument("--size", type=int, default=1000)
    r = sub.add_parser("recv")
    r.add_argument("port", type=int)
    r.add_argument("--seconds", type=float, default=12)
    r.add_argument("--out", required=True)
    args = p.parse_args()
    send(args) if args.cmd == "send" else recv(args)


if __name__ == "__main__":
    main()
