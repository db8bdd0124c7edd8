"""The token ids of a GGUF's vocabulary whose bytes are not valid UTF-8 on their own (byte
tokens, pieces of a multi-byte character). bench/load.py bans them with logit_bias so that
a random-weight model writes valid UTF-8: llama-server fails a request whose output is not
(its chat-reply parser throws, on every route). A token valid alone keeps any sequence of
such tokens valid. Standard library only; reads the metadata section, not the tensors.

Vocabularies: byte-level BPE (tokenizer.ggml.model "gpt2": GPT-2's byte-to-character map)
and SentencePiece ("llama": the <0xNN> byte tokens); tokens outside the map (added and
special tokens) count as valid text.
"""
import struct

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class GgufError(Exception):
    pass


def _read(f, fmt):
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise GgufError("the file ends inside its metadata")
    return struct.unpack(fmt, data)[0]


def _string(f):
    n = _read(f, "<Q")
    data = f.read(n)
    if len(data) != n:
        raise GgufError("the file ends inside a string")
    return data


def _value(f, vtype, keep):
    if vtype in _SCALARS:
        return _read(f, _SCALARS[vtype])
    if vtype == 8:
        return _string(f)
    if vtype == 9:
        etype, n = _read(f, "<I"), _read(f, "<Q")
        if not keep and etype in _SCALARS:
            f.seek(n * struct.calcsize(_SCALARS[etype]), 1)
            return None
        items = [_value(f, etype, keep) for _ in range(n)]
        return items if keep else None
    raise GgufError(f"unknown metadata type {vtype}")


def read_vocab(path):
    """(tokenizer model name, list of token byte strings as stored)."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise GgufError(f"{path} is not a GGUF file")
        version = _read(f, "<I")
        if version < 2:
            raise GgufError(f"GGUF version {version} is not supported")
        _read(f, "<Q")
        n_kv = _read(f, "<Q")
        model, tokens = None, None
        for _ in range(n_kv):
            key = _string(f).decode("utf-8", "replace")
            vtype = _read(f, "<I")
            wanted = key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens")
            v = _value(f, vtype, wanted)
            if key == "tokenizer.ggml.model":
                model = v.decode("utf-8", "replace")
            elif key == "tokenizer.ggml.tokens":
                tokens = v
            if model is not None and tokens is not None:
                break
    if tokens is None:
        raise GgufError(f"{path} has no tokenizer.ggml.tokens")
    return model or "", tokens


def _byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _valid(data):
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def invalid_utf8_tokens(path):
    """Sorted ids of the tokens whose bytes are not valid UTF-8 alone."""
    model, tokens = read_vocab(path)
    out = []
    if model == "gpt2":
        dec = _byte_decoder()
        for i, t in enumerate(tokens):
            text = t.decode("utf-8", "replace")
            if all(ch in dec for ch in text) and not _valid(bytes(dec[ch] for ch in text)):
                out.append(i)
    elif model == "llama":
        for i, t in enumerate(tokens):
            if len(t) == 6 and t.startswith(b"<0x") and t.endswith(b">") and int(t[3:5], 16) >= 0x80:
                out.append(i)
    else:
        raise GgufError(f"tokenizer model '{model}' is not handled (gpt2 or llama)")
    return out
