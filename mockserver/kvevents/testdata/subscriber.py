"""An independent subscriber for sglmock's KV events: pyzmq and msgpack-python,
as a Python router reads SGLang's events.

usage: subscriber.py bind|connect ENDPOINT COUNT [REPLAY_ENDPOINT FROM]

Prints "ready" once subscribed, then one JSON line per message: topic, seq,
the decoded batch, and whether msgpack re-encodes the batch to the very bytes
received (canonical: the shortest form of every integer, float64 ts, as msgspec
writes). With a replay endpoint it then asks a DEALER socket for the messages
from FROM on and prints them the same way, then "end".
"""
import json
import sys

import msgpack
import zmq


def show(topic, seq_bytes, payload):
    batch = msgpack.unpackb(payload, raw=False)
    print(json.dumps({
        "topic": topic.decode(),
        "seq": int.from_bytes(seq_bytes, "big", signed=True),
        "batch": batch,
        "canonical": msgpack.packb(batch, use_bin_type=True) == payload,
    }), flush=True)


def main():
    mode, endpoint, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    sub.setsockopt(zmq.RCVTIMEO, 20000)
    if mode == "bind":
        sub.bind(endpoint)
    else:
        sub.connect(endpoint)
    print("ready", flush=True)
    for _ in range(count):
        show(*sub.recv_multipart())
    if len(sys.argv) > 4:
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.RCVTIMEO, 20000)
        dealer.connect(sys.argv[4])
        dealer.send_multipart([b"", int(sys.argv[5]).to_bytes(8, "big")])
        while True:
            _, seq, payload = dealer.recv_multipart()
            if int.from_bytes(seq, "big", signed=True) == -1:
                break
            show(b"", seq, payload)
        print("end", flush=True)
    ctx.destroy(linger=0)


if __name__ == "__main__":
    main()
