"""A Sentinel that says what a test tells it to: it names the master at 127.0.0.1:MASTER_PORT
for the service `mcp-store` (SENTINEL MASTERS, get-master-addr-by-name), takes subscriptions,
and when a client sends `ANNOUNCE <payload>` publishes that payload on `+switch-master` to every
subscriber, as a Sentinel announcing a failover would (a stale or false one, here). Prints
`listening` once it listens and `subscribed` at each subscription. Standard library only.

    python3 fake_sentinel.py PORT MASTER_PORT
"""

import asyncio
import sys

subscribers = set()


def bulk(text):
    data = text.encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def array(items):
    return b"*%d\r\n" % len(items) + b"".join(items)


async def read_command(reader):
    line = await reader.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.decode().split()
    words = []
    for _ in range(int(line[1:])):
        size = int((await reader.readline())[1:])
        words.append((await reader.readexactly(size + 2))[:-2].decode())
    return words


async def serve(reader, writer, master_port):
    try:
        while (command := await read_command(reader)) is not None:
            name = [word.upper() for word in command[:2]]
            if name == ["SENTINEL", "MASTERS"]:
                master = ["name", "mcp-store", "ip", "127.0.0.1", "port", str(master_port),
                          "flags", "master", "num-slaves", "0"]
                writer.write(array([array([bulk(word) for word in master])]))
            elif name[:2] == ["SENTINEL", "GET-MASTER-ADDR-BY-NAME"]:
                writer.write(array([bulk("127.0.0.1"), bulk(str(master_port))]))
            elif name[:1] == ["SENTINEL"]:
                writer.write(b"*0\r\n")
            elif name[:1] == ["ROLE"]:
                writer.write(array([bulk("sentinel"), array([bulk("mcp-store")])]))
            elif name[:1] == ["SUBSCRIBE"]:
                writer.write(array([bulk("subscribe"), bulk(command[1]), b":1\r\n"]))
                subscribers.add(writer)
                print("subscribed", flush=True)
            elif name[:1] == ["PING"]:
                writer.write(array([bulk("pong"), bulk("")]) if writer in subscribers else b"+PONG\r\n")
            elif name[:1] == ["ANNOUNCE"]:
                payload = " ".join(command[1:])
                for subscriber in list(subscribers):
                    subscriber.write(array([bulk("message"), bulk("+switch-master"), bulk(payload)]))
                    await subscriber.drain()
                writer.write(b":%d\r\n" % len(subscribers))
            else:
                writer.write(b"+OK\r\n")
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        subscribers.discard(writer)
        writer.close()


async def main(port, master_port):
    server = await asyncio.start_server(lambda r, w: serve(r, w, master_port), "127.0.0.1", port)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
