"""safetensors files from Python, for the tests that corrupt or rewrite them: a file's tensors as
[name, dtype, shape, bytearray] in data order (plus its __metadata__), and back."""
import json
import struct


def read(path):
    """(tensors, metadata) of a file; each tensor is [name, dtype, shape, bytearray]."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    meta = hdr.pop("__metadata__", None)
    data = b[8 + n:]
    ts = [[k, v["dtype"], v["shape"], bytearray(data[v["data_offsets"][0]:v["data_offsets"][1]])]
          for k, v in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0])]
    return ts, meta


def header(tensors, meta=None):
    """The JSON header that lays `tensors` out back to back."""
    hdr, off = {}, 0
    if meta:
        hdr["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    return json.dumps(hdr, separators=(",", ":"))


def encode(tensors, meta=None, header_text=None, pad=True):
    """The file's bytes; `header_text` replaces the header (to write one no JSON writer would)."""
    h = (header(tensors, meta) if header_text is None else header_text).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(bytes(t[3]) for t in tensors)


def write(path, tensors, meta=None, header_text=None, pad=True):
    with open(path, "wb") as f:
        f.write(encode(tensors, meta, header_text, pad))
