"""A compiled (numba) JSON scanner for Kineto traces: bytes -> where each needed field lies.

It validates the whole document and records, for each event, the byte range
and token type of every field `lumos.trace.reader` needs, without building a
Python object per event. The reader decodes those ranges column by column and
falls back to the plain orjson path for anything the scanner flags as unusual.
Compiles in about 7 s the first time (cached in `__pycache__`).
"""

from __future__ import annotations

import numpy as np

from lumos.jit import njit


# token types of a recorded value
T_ABSENT, T_NULL, T_INT, T_NUM, T_STR, T_STR_ESC, T_TRUE, T_FALSE, T_ARR, T_OBJ = range(10)
MAX_DEPTH = 256  # orjson refuses beyond 1024; nesting deeper than this is left to it

# recorded fields: the event's own, then those of its args (a field is at most one value)
EVENT_KEYS = ("cat", "name", "ts", "dur", "pid", "tid")
ARG_KEYS = ("correlation", "External id", "external id", "stream", "device", "wait_on_stream",
            "wait_on_cuda_event_record_corr_id", "In msg nelems", "Out msg nelems", "Group size", "Sequence number",
            "cuda_sync_kind", "Collective name", "dtype", "Process Group Ranks", "Input Dims",
            "Process Group Name")
F = {k: i for i, k in enumerate(EVENT_KEYS + ARG_KEYS)}
N_FIELDS, N_EVENT = len(F), len(EVENT_KEYS)
I_FIRST = F["pid"]  # pid .. Sequence number hold integers: plain ones are read by the scanner
N_INT = F["Sequence number"] - I_FIRST + 1
K_PH, K_ARGS = -2, -3  # event keys the scanner acts on itself


def _key_table(keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    raw = [k.encode() for k in keys]
    table = np.zeros((len(raw), max(map(len, raw))), dtype=np.uint8)
    for i, k in enumerate(raw):
        table[i, :len(k)] = np.frombuffer(k, dtype=np.uint8)
    return table, np.array([len(k) for k in raw], dtype=np.int64)


# module constants (numba compiles them into the code; they only change with this file)
EVENT_TABLE, EVENT_LENS = _key_table(EVENT_KEYS + ("ph", "args"))
EVENT_IDS = np.array(list(range(N_EVENT)) + [K_PH, K_ARGS], dtype=np.int64)
ARG_TABLE, ARG_LENS = _key_table(ARG_KEYS)
TRACE_KEY = np.frombuffer(b"traceEvents", dtype=np.uint8)


@njit(cache=True)
def _skip_ws(buf, i, n):
    while i < n:
        c = buf[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            return i
        i += 1
    return i


@njit(cache=True)
def _hex4(buf, i, n):
    """The code unit of the \\uXXXX escape at i, or -1."""
    if i + 6 > n or buf[i] != 92 or buf[i + 1] != 117:
        return -1
    v = 0
    for k in range(i + 2, i + 6):
        h = buf[k]
        if 48 <= h <= 57:
            v = v * 16 + (h - 48)
        elif 97 <= h <= 102:
            v = v * 16 + (h - 87)
        elif 65 <= h <= 70:
            v = v * 16 + (h - 55)
        else:
            return -1
    return v


@njit(cache=True)
def _string_end(buf, i, n):
    """buf[i] is '"'. Returns (end, escaped); end -1 if invalid (as orjson would find it:
    raw control characters, bad escapes, unpaired surrogates)."""
    i += 1
    escaped = False
    while i < n:
        c = buf[i]
        if c == 34:
            return i + 1, escaped
        if c == 92:
            escaped = True
            if i + 1 >= n:
                return -1, escaped
            e = buf[i + 1]
            if e == 117:
                v = _hex4(buf, i, n)
                if v < 0 or 0xDC00 <= v <= 0xDFFF:
                    return -1, escaped
                if 0xD800 <= v <= 0xDBFF:  # a high surrogate needs its low half next
                    low = _hex4(buf, i + 6, n)
                    if not 0xDC00 <= low <= 0xDFFF:
                        return -1, escaped
                    i += 6
                i += 6
            elif e == 34 or e == 92 or e == 47 or e == 98 or e == 102 or e == 110 or e == 114 or e == 116:
                i += 2
            else:
                return -1, escaped
        elif c < 32:
            return -1, escaped
        else:
            i += 1
    return -1, escaped


@njit(cache=True)
def _number_end(buf, i, n):
    """A JSON number at i. Returns (end, is_plain_int, value); end -1 if invalid, or so
    long or large that orjson's verdict (a float, or an infinity error) is left to it."""
    neg = buf[i] == 45
    if neg:
        i += 1
    if i >= n:
        return -1, False, 0
    d0 = i
    if buf[i] == 48:
        i += 1
    elif 49 <= buf[i] <= 57:
        while i < n and 48 <= buf[i] <= 57:
            i += 1
    else:
        return -1, False, 0
    digits = i - d0
    plain = True
    if i < n and buf[i] == 46:
        i += 1
        f0 = i
        while i < n and 48 <= buf[i] <= 57:
            i += 1
        if i == f0 or i - f0 > 200:
            return -1, False, 0
        plain = False
    if i < n and (buf[i] == 101 or buf[i] == 69):
        i += 1
        negative_exp = i < n and buf[i] == 45
        if i < n and (buf[i] == 43 or buf[i] == 45):
            i += 1
        e0 = i
        exp = 0
        while i < n and 48 <= buf[i] <= 57:
            if exp < 10000:
                exp = exp * 10 + (buf[i] - 48)
            i += 1
        if i == e0 or (not negative_exp and exp + digits > 250):  # underflow is 0.0; overflow an error
            return -1, False, 0
        plain = False
    if digits > 200:
        return -1, False, 0
    value = 0
    if plain and digits <= 18:
        for k in range(d0, d0 + digits):
            value = value * 10 + (buf[k] - 48)
        if neg:
            value = -value
    else:
        plain = False
    return i, plain, value


@njit(cache=True)
def _literal_end(buf, i, n):
    """true, false or null at i: its end, or -1."""
    c = buf[i]
    if c == 116 and i + 4 <= n and buf[i + 1] == 114 and buf[i + 2] == 117 and buf[i + 3] == 101:
        return i + 4
    if c == 110 and i + 4 <= n and buf[i + 1] == 117 and buf[i + 2] == 108 and buf[i + 3] == 108:
        return i + 4
    if (c == 102 and i + 5 <= n and buf[i + 1] == 97 and buf[i + 2] == 108 and buf[i + 3] == 115
            and buf[i + 4] == 101):
        return i + 5
    return -1


@njit(cache=True)
def _scalar_end(buf, i, n):
    c = buf[i]
    if c == 34:
        e, _ = _string_end(buf, i, n)
        return e
    if c == 45 or 48 <= c <= 57:
        e, _, _ = _number_end(buf, i, n)
        return e
    return _literal_end(buf, i, n)


@njit(cache=True)
def _value_end(buf, i, n, stack):
    """Validate and skip any JSON value at i: its end, or -1 if invalid or too deep."""
    c = buf[i]
    if c != 123 and c != 91:
        return _scalar_end(buf, i, n)
    stack[0] = c
    sp = 1
    i += 1
    state = 0  # 0: just opened, 1: after a comma, 2: after a value
    while True:
        i = _skip_ws(buf, i, n)
        if i >= n:
            return -1
        c = buf[i]
        close = 125 if stack[sp - 1] == 123 else 93
        if state == 2 or (state == 0 and c == close):
            if c == 44 and state == 2:
                i += 1
                state = 1
                continue
            if c != close:
                return -1
            sp -= 1
            i += 1
            if sp == 0:
                return i
            state = 2
            continue
        if stack[sp - 1] == 123:  # a member: "key": value
            if c != 34:
                return -1
            e, _ = _string_end(buf, i, n)
            if e < 0:
                return -1
            i = _skip_ws(buf, e, n)
            if i >= n or buf[i] != 58:
                return -1
            i = _skip_ws(buf, i + 1, n)
            if i >= n:
                return -1
            c = buf[i]
        if c == 123 or c == 91:
            if sp >= len(stack):
                return -1
            stack[sp] = c
            sp += 1
            i += 1
            state = 0
            continue
        e = _scalar_end(buf, i, n)
        if e < 0:
            return -1
        i = e
        state = 2


@njit(cache=True)
def _key_id(buf, lo, hi, table, lens):
    """Row of the key buf[lo:hi] in `table`, or -1."""
    m = hi - lo
    for k in range(len(lens)):
        if lens[k] == m:
            same = True
            for j in range(m):
                if buf[lo + j] != table[k, j]:
                    same = False
                    break
            if same:
                return k
    return -1


@njit(cache=True)
def _member_key(buf, i, n):
    """At a member: (key_lo, key_hi, value_start); value_start -1 if invalid or the key is
    escaped (an escaped key might spell a field's name)."""
    if buf[i] != 34:
        return 0, 0, -1
    e, esc = _string_end(buf, i, n)
    if e < 0 or esc:
        return 0, 0, -1
    j = _skip_ws(buf, e, n)
    if j >= n or buf[j] != 58:
        return 0, 0, -1
    j = _skip_ws(buf, j + 1, n)
    if j >= n:
        return 0, 0, -1
    return i + 1, e - 1, j


@njit(cache=True)
def _after_member(buf, e, n):
    """After a member's value: (next index, 1 more members / 0 closed / -1 invalid)."""
    i = _skip_ws(buf, e, n)
    if i >= n:
        return i, -1
    if buf[i] == 44:
        return i + 1, 1
    if buf[i] == 125:
        return i + 1, 0
    return i, -1


@njit(cache=True)
def _args_members(buf, i, n, row, loc, stack):
    """Record the wanted members of the args object at i; its end, or -1."""
    for f in range(N_EVENT, N_FIELDS):  # a repeated "args" replaces the earlier one
        loc[row, f, 0] = -1
    i = _skip_ws(buf, i + 1, n)
    if i < n and buf[i] == 125:
        return i + 1
    while True:
        i = _skip_ws(buf, i, n)
        if i >= n:
            return -1
        klo, khi, j = _member_key(buf, i, n)
        if j < 0:
            return -1
        e = _value_end(buf, j, n, stack)
        if e < 0:
            return -1
        k = _key_id(buf, klo, khi, ARG_TABLE, ARG_LENS)
        if k >= 0:
            loc[row, N_EVENT + k, 0] = j
            loc[row, N_EVENT + k, 1] = e
        i, more = _after_member(buf, e, n)
        if more <= 0:
            return i if more == 0 else -1


@njit(cache=True)
def _event_members(buf, i, n, row, loc, stack):
    """Record the wanted members of the event object at i.
    Returns (end, is "ph": "X", args usable); end -1 if invalid or unsure."""
    for f in range(N_FIELDS):
        loc[row, f, 0] = -1
    ph_x = False
    args_ok = True
    i = _skip_ws(buf, i + 1, n)
    if i < n and buf[i] == 125:
        return i + 1, False, True
    while True:
        i = _skip_ws(buf, i, n)
        if i >= n:
            return -1, False, False
        klo, khi, j = _member_key(buf, i, n)
        if j < 0:
            return -1, False, False
        k = _key_id(buf, klo, khi, EVENT_TABLE, EVENT_LENS)
        kid = EVENT_IDS[k] if k >= 0 else -1
        if kid == K_ARGS and buf[j] == 123:
            e = _args_members(buf, j, n, row, loc, stack)
            args_ok = True
        else:
            e = _value_end(buf, j, n, stack)
            if kid >= 0:
                loc[row, kid, 0] = j
                loc[row, kid, 1] = e
            elif kid == K_PH and e >= 0:
                ph_x = e - j == 3 and buf[j] == 34 and buf[j + 1] == 88
                if buf[j] == 34 and not ph_x:
                    for p in range(j + 1, e - 1):
                        if buf[p] == 92:  # an escaped "ph" might read X
                            return -1, False, False
            elif kid == K_ARGS:  # not an object: null is no args, anything else is unusual
                for f in range(N_EVENT, N_FIELDS):
                    loc[row, f, 0] = -1
                args_ok = e - j == 4 and buf[j] == 110
        if e < 0:
            return -1, False, False
        i, more = _after_member(buf, e, n)
        if more < 0:
            return -1, False, False
        if more == 0:
            return i, ph_x, args_ok


@njit(cache=True)
def _scan(buf, cap):
    """Validate the whole document and record where the fields of every "ph": "X" event lie.

    Returns (ok, rows, loc, args_ok, events_lo, events_hi): loc[row, field] is the
    field's byte span (start -1: absent); events_lo:events_hi is the traceEvents array.
    """
    n = len(buf)
    stack = np.empty(MAX_DEPTH, dtype=np.uint8)
    loc = np.empty((cap + 1, N_FIELDS, 2), dtype=np.int64)  # one spare row for other events
    args_ok = np.empty(cap, dtype=np.bool_)
    rows = 0
    lo = hi = -1
    i = _skip_ws(buf, 0, n)
    if i >= n or buf[i] != 123:
        return False, 0, loc, args_ok, lo, hi
    i = _skip_ws(buf, i + 1, n)
    more = 1
    if i < n and buf[i] == 125:
        i += 1
        more = 0
    while more == 1:  # members of the top-level object
        i = _skip_ws(buf, i, n)
        if i >= n:
            return False, 0, loc, args_ok, lo, hi
        klo, khi, j = _member_key(buf, i, n)
        if j < 0:
            return False, 0, loc, args_ok, lo, hi
        trace = khi - klo == len(TRACE_KEY)
        for k in range(khi - klo):
            if trace and buf[klo + k] != TRACE_KEY[k]:
                trace = False
        if not trace:
            e = _value_end(buf, j, n, stack)
        else:
            if lo >= 0 or buf[j] != 91:  # repeated, or not a list: the plain path says so
                return False, 0, loc, args_ok, lo, hi
            lo = j
            i = _skip_ws(buf, j + 1, n)
            ev_more = 1
            if i < n and buf[i] == 93:
                i += 1
                ev_more = 0
            while ev_more == 1:  # the events
                i = _skip_ws(buf, i, n)
                if i >= n:
                    return False, 0, loc, args_ok, lo, hi
                if buf[i] == 123:
                    e, ph_x, ok = _event_members(buf, i, n, rows, loc, stack)
                    if ph_x and e >= 0:
                        if rows >= cap:
                            return False, 0, loc, args_ok, lo, hi
                        args_ok[rows] = ok
                        rows += 1
                else:
                    e = _value_end(buf, i, n, stack)
                if e < 0:
                    return False, 0, loc, args_ok, lo, hi
                i = _skip_ws(buf, e, n)
                if i < n and buf[i] == 44:
                    i += 1
                elif i < n and buf[i] == 93:
                    i += 1
                    ev_more = 0
                else:
                    return False, 0, loc, args_ok, lo, hi
            hi = i
            e = i
        if e < 0:
            return False, 0, loc, args_ok, lo, hi
        i, more = _after_member(buf, e, n)
        if more < 0:
            return False, 0, loc, args_ok, lo, hi
    if _skip_ws(buf, i, n) != n or lo < 0:
        return False, 0, loc, args_ok, lo, hi
    return True, rows, loc, args_ok, lo, hi


@njit(cache=True)
def _classify(buf, loc, rows):
    """Token type of every recorded value, and the value of plain integers."""
    typ = np.zeros((rows, N_FIELDS), dtype=np.int8)
    iv = np.zeros((rows, N_INT), dtype=np.int64)
    for r in range(rows):
        for f in range(N_FIELDS):
            i = loc[r, f, 0]
            if i < 0:
                continue
            c = buf[i]
            if c == 34:
                t = T_STR
                for p in range(i + 1, loc[r, f, 1] - 1):
                    if buf[p] == 92:
                        t = T_STR_ESC
                        break
            elif c == 45 or 48 <= c <= 57:
                _, plain, v = _number_end(buf, i, loc[r, f, 1])
                t = T_INT if plain else T_NUM
                if plain and I_FIRST <= f < I_FIRST + N_INT:
                    iv[r, f - I_FIRST] = v
            elif c == 116:
                t = T_TRUE
            elif c == 102:
                t = T_FALSE
            elif c == 110:
                t = T_NULL
            elif c == 91:
                t = T_ARR
            else:
                t = T_OBJ
            typ[r, f] = t
    return typ, iv


@njit(cache=True)
def _gather(buf, lo, hi, sep, bracket):
    """The byte spans buf[lo[k]:hi[k]] joined by `sep` (as one JSON array if `bracket`)."""
    total = 0
    for k in range(len(lo)):
        total += hi[k] - lo[k] + 1
    out = np.empty(total + 2, dtype=np.uint8)
    j = 0
    if bracket:
        out[0] = 91
        j = 1
    for k in range(len(lo)):
        if k:
            out[j] = sep
            j += 1
        for p in range(lo[k], hi[k]):
            out[j] = buf[p]
            j += 1
    if bracket:
        out[j] = 93
        j += 1
    return out[:j]


