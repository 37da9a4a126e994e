#!/usr/bin/env python3
"""Traffic of the pacing paper's five application classes, downstream (server to
client), each application on its own port, and what each one got: its throughput and
its one-way delay. benches/section7.rs runs it in the namespace testbed.

    appmix.py serve  --spec SPEC --out FILE          in the server's namespace
    appmix.py client --spec SPEC --server IP --seconds S --warmup W --out FILE

SPEC is CLASS:PORT,... with the classes' shapes:

  download  one TCP connection, the server sends as fast as it can
  web       page loads: the client asks for 500 kB, reads it, waits 0.5 s, again
  video     one TCP connection, the server sends at most 5 Mbit/s (its best level)
  terminal  the client sends 64 bytes every 50 ms, the server answers 400 (64 kbit/s)
  voip      UDP, the server sends 172 bytes every 20 ms (G.711: 80 kbit/s with IP and
            UDP) once the client has said hello

Measured from WARMUP to SECONDS: the client's bytes received (web: the mean rate of
the page loads, as their users see it), and the median one-way delay: for terminal
half each exchange's round trip, for VoIP each packet's (both namespaces share the
monotonic clock), with VoIP's loss from its sequence numbers. Terminal and VoIP,
which ask for a fixed rate, also report it (demand_kbps). The client writes
{"window": [from, to], "apps": [...]} to --out at the end; the server, when
terminated (SIGTERM), each TCP port's samples of its sockets' smoothed round trip
(TCP_INFO, every 200 ms, [monotonic time, ms]), whose halves within the window are
the TCP classes' delay.
"""
import argparse
import asyncio
import json
import signal
import socket
import statistics
import struct
import time

PAGE_BYTES = 500_000
VIDEO_KBPS = 5000
TERMINAL_PERIOD = 0.05
TERMINAL_ANSWER = 400
VOIP_PERIOD = 0.02
VOIP_BYTES = 172  # with IP and UDP, 200 bytes every 20 ms: G.711's 80 kbit/s


def parse_spec(spec):
    apps = []
    for item in spec.split(","):
        cls, port = item.split(":")
        apps.append((cls, int(port)))
    return apps


def tcp_rtt_ms(sock):
    """The socket's smoothed round trip (tcpi_rtt, microseconds at offset 68)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return struct.unpack_from("I", info, 68)[0] / 1000.0


# ---- server -----------------------------------------------------------------

class Server:
    def __init__(self, apps):
        self.apps = apps
        self.rtts = {port: [] for _, port in apps}
        self.sockets = {}

    async def sample_rtts(self):
        while True:
            await asyncio.sleep(0.2)
            for port, socks in self.sockets.items():
                for s in list(socks):
                    try:
                        self.rtts[port].append((time.monotonic(), tcp_rtt_ms(s)))
                    except OSError:
                        socks.discard(s)

    def track(self, port, writer):
        sock = writer.get_extra_info("socket")
        self.sockets.setdefault(port, set()).add(sock)

    async def serve_tcp(self, cls, port):
        async def handle(reader, writer):
            self.track(port, writer)
            try:
                if cls == "download":
                    chunk = b"d" * 65536
                    while True:
                        writer.write(chunk)
                        await writer.drain()
                elif cls == "video":
                    chunk = b"v" * int(VIDEO_KBPS * 1000 / 8 * 0.02)
                    next_at = time.monotonic()
                    while True:
                        writer.write(chunk)
                        await writer.drain()
                        next_at += 0.02
                        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                elif cls == "web":
                    body = b"w" * 65536
                    while True:
                        line = await reader.readline()
                        if not line:
                            return
                        left = int(line)
                        while left > 0:
                            n = min(left, len(body))
                            writer.write(body[:n])
                            left -= n
                            await writer.drain()
                elif cls == "terminal":
                    while True:
                        ask = await reader.readexactly(64)
                        writer.write(ask[:8] + b"t" * (TERMINAL_ANSWER - 8))
                        await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        await asyncio.start_server(handle, "0.0.0.0", port)

    async def serve_voip(self, port):
        loop = asyncio.get_running_loop()
        peers = set()

        class Hello(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                peers.add(addr)

        transport, _ = await loop.create_datagram_endpoint(
            Hello, local_addr=("0.0.0.0", port))
        seq = 0
        pad = b"p" * (VOIP_BYTES - 12)
        next_at = time.monotonic()
        while True:
            for peer in list(peers):
                transport.sendto(struct.pack("!Id", seq, time.monotonic()) + pad, peer)
            seq += 1
            next_at += VOIP_PERIOD
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def run(self):
        tasks = [asyncio.create_task(self.sample_rtts())]
        for cls, port in self.apps:
            if cls == "voip":
                tasks.append(asyncio.create_task(self.serve_voip(port)))
            else:
                await self.serve_tcp(cls, port)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print("serving", flush=True)
        await stop.wait()


# ---- client -----------------------------------------------------------------

class App:
    def __init__(self, cls, port):
        self.cls, self.port = cls, port
        self.bytes = 0
        self.delays = []
        self.loads = []  # web: rates of the page loads, kbit/s
        self.received = 0
        self.first_seq = None
        self.last_seq = None


async def client(args):
    apps = [App(c, p) for c, p in parse_spec(args.spec)]
    start = time.monotonic()
    window = (start + args.warmup, start + args.seconds)

    def inside():
        return window[0] <= time.monotonic() < window[1]

    async def stream(app):
        reader, writer = await asyncio.open_connection(args.server, app.port)
        while time.monotonic() < window[1]:
            data = await reader.read(65536)
            if not data:
                break
            if inside():
                app.bytes += len(data)
        writer.close()

    async def web(app):
        reader, writer = await asyncio.open_connection(args.server, app.port)
        while time.monotonic() < window[1]:
            began = time.monotonic()
            writer.write(b"%d\n" % PAGE_BYTES)
            await writer.drain()
            await reader.readexactly(PAGE_BYTES)
            ended = time.monotonic()
            if began >= window[0] and ended < window[1]:
                app.loads.append(PAGE_BYTES * 8 / 1000 / (ended - began))
            await asyncio.sleep(0.5)
        writer.close()

    async def terminal(app):
        reader, writer = await asyncio.open_connection(args.server, app.port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        next_at = time.monotonic()
        while time.monotonic() < window[1]:
            sent = time.monotonic()
            writer.write(struct.pack("!d", sent) + b"k" * 56)
            await writer.drain()
            answer = await reader.readexactly(TERMINAL_ANSWER)
            got = time.monotonic()
            if inside():
                app.bytes += len(answer)
                app.delays.append((got - struct.unpack("!d", answer[:8])[0]) * 1000 / 2)
            next_at += TERMINAL_PERIOD
            await asyncio.sleep(max(0.0, next_at - got))
        writer.close()

    async def voip(app):
        loop = asyncio.get_running_loop()

        class Listen(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                now = time.monotonic()
                if not (window[0] <= now < window[1]):
                    return
                seq, sent = struct.unpack_from("!Id", data)
                app.bytes += len(data)
                app.received += 1
                app.delays.append((now - sent) * 1000)
                app.first_seq = seq if app.first_seq is None else min(app.first_seq, seq)
                app.last_seq = seq if app.last_seq is None else max(app.last_seq, seq)

        transport, _ = await loop.create_datagram_endpoint(
            Listen, remote_addr=(args.server, app.port))
        while time.monotonic() < window[1]:
            transport.sendto(b"hello")
            await asyncio.sleep(1.0)
        transport.close()

    run = {"download": stream, "video": stream, "web": web,
           "terminal": terminal, "voip": voip}
    await asyncio.gather(*(run[a.cls](a) for a in apps), return_exceptions=False)
    seconds = args.seconds - args.warmup
    out = []
    for a in apps:
        if a.cls == "web":
            kbps = statistics.mean(a.loads) if a.loads else 0.0
        else:
            kbps = a.bytes * 8 / 1000 / seconds
        entry = {"class": a.cls, "port": a.port, "throughput_kbps": round(kbps, 1)}
        if a.cls == "terminal":
            entry["demand_kbps"] = TERMINAL_ANSWER * 8 / 1000 / TERMINAL_PERIOD
        if a.cls == "voip":
            entry["demand_kbps"] = VOIP_BYTES * 8 / 1000 / VOIP_PERIOD
        if a.delays:
            entry["delay_ms"] = round(statistics.median(a.delays), 2)
        if a.cls == "voip" and a.first_seq is not None:
            expected = a.last_seq - a.first_seq + 1
            entry["loss"] = round(1 - a.received / expected, 4)
        out.append(entry)
    with open(args.out, "w") as f:
        json.dump({"window": list(window), "apps": out}, f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["serve", "client"])
    p.add_argument("--spec", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--server")
    p.add_argument("--seconds", type=float, default=25)
    p.add_argument("--warmup", type=float, default=10)
    args = p.parse_args()
    if args.role == "client":
        asyncio.run(client(args))
        return
    server = Server(parse_spec(args.spec))
    try:
        asyncio.run(server.run())
    finally:
        # Half the smoothed round trip of each TCP application, sampled while the
        # client measured (the last SECONDS - WARMUP of the run: the caller says).
        out = {}
        for port, samples in server.rtts.items():
            if samples:
                out[str(port)] = [[round(t, 3), round(r, 2)] for t, r in samples]
        with open(args.out, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
