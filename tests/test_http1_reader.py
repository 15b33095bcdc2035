"""bloomwise._native.http1.ResponseReader: HTTP/1.1 responses off a byte stream, whatever its cuts (Hypothesis,
with httptools as a second reader where it is installed), every framing, and every malformed or oversized input
refused with a ResponseError naming it."""
import pytest
from hypothesis import given, settings, strategies as st

from bloomwise._native.http1 import (KNOWN_HEAD_BYTES, KNOWN_HEAD_FIELDS, KNOWN_HEADS_MAX, ResponseError,
                                     ResponseReader, known_heads)

try:
    import httptools
except ImportError:
    httptools = None

TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!#$%&'*+^`|~",
                min_size=1, max_size=12)
VALUE = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"),
                max_size=30).map(str.strip)
RESERVED = {"content-length", "transfer-encoding", "connection", "set-cookie"}


@st.composite
def responses(draw):
    """(bytes of one response, what the reader must give: (status, headers, body, keep_alive), closes: whether the
    body ends with the connection)."""
    fields = draw(st.lists(st.tuples(TOKEN.filter(lambda n: n.lower() not in RESERVED), VALUE), max_size=6))
    framing = draw(st.sampled_from(["length", "chunked", "no-body", "close"]))
    status = {"no-body": draw(st.sampled_from([204, 304]))}.get(framing, draw(st.sampled_from([200, 404, 504])))
    body = b"" if framing == "no-body" else draw(st.binary(max_size=300))
    connection_close = draw(st.booleans()) and framing != "close"
    expected = {}
    names = {}
    for name, value in fields:
        first = names.setdefault(name.lower(), name)
        expected[first] = value if first not in expected else expected[first] + ", " + value
    lines = list(fields)
    if framing == "length":
        lines.append(("Content-Length", str(len(body))))
    elif framing == "chunked":
        lines.append(("Transfer-Encoding", "chunked"))
    if connection_close:
        lines.append(("Connection", "close"))
    for name, value in lines[len(fields):]:
        expected[name] = value
    head = f"HTTP/1.1 {status} Some Reason\r\n" + "".join(f"{n}: {v}\r\n" for n, v in lines) + "\r\n"
    data = head.encode("latin-1")
    if framing == "chunked":
        cuts = sorted(set(draw(st.lists(st.integers(0, len(body)), max_size=4))) | {0, len(body)})
        for a, b in zip(cuts, cuts[1:]):
            if b > a:
                data += b"%x" % (b - a) + draw(st.sampled_from([b"", b";ext=1"])) + b"\r\n" + body[a:b] + b"\r\n"
        data += b"0\r\n" + draw(st.sampled_from([b"", b"X-Trailer: t\r\n"])) + b"\r\n"
    else:
        data += body
    keep_alive = not connection_close and framing != "close"
    return data, (status, expected, body, keep_alive), framing == "close"


def read_all(pieces, max_body=10**6, close=True):
    reader, got = ResponseReader(), []
    for piece in pieces:
        reader.feed(piece)
        while (response := reader.next(max_body)) is not None:
            got.append(response)
    if close:
        last = reader.at_close(max_body)
        if last is not None:
            got.append(last)
    return got


@settings(max_examples=300, deadline=None)
@given(st.lists(responses(), min_size=1, max_size=4), st.data())
def test_any_cut_of_a_stream_of_responses_reads_back_exactly(stream, data):
    # only the last may be delimited by the connection's close
    stream = [r for r in stream[:-1] if not r[2]] + stream[-1:]
    raw = b"".join(r[0] for r in stream)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(raw)), max_size=6))))
    pieces = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
    assert read_all(pieces) == [r[1] for r in stream]
    assert read_all(pieces) == [r[1] for r in stream]   # again: its heads are known now


@pytest.mark.skipif(httptools is None, reason="httptools (proxy extra) is the second reader")
@settings(max_examples=200, deadline=None)
@given(responses())
def test_status_body_and_keep_alive_agree_with_httptools(response):
    raw, (status, _, body, keep_alive), closes = response

    class Sink:
        def __init__(self):
            self.body, self.done = [], False

        def on_headers_complete(self):
            self.keep_alive = parser.should_keep_alive()   # (asked after the message, llhttp says False)

        def on_body(self, chunk):
            self.body.append(chunk)

        def on_message_complete(self):
            self.done = True

    sink = Sink()
    parser = httptools.HttpResponseParser(sink)
    parser.feed_data(raw)
    if closes:
        parser.feed_data(b"")   # (llhttp ends a close-delimited body at EOF; a zero-length feed is not EOF)
    else:
        assert sink.done
        assert sink.keep_alive == keep_alive
    assert parser.get_status_code() == status and b"".join(sink.body) == body
    assert read_all([raw]) == [response[1]]


def test_repeated_fields_are_joined_under_the_first_name_and_a_second_set_cookie_is_dropped():
    raw = (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\ncache-control: private\r\nSet-Cookie: a=1\r\n"
           b"Set-Cookie: b=2\r\n folded-onto-the-dropped-cookie\r\nX-Long: one\r\n\t two\r\nContent-Length: 0\n\n")
    [(status, headers, body, keep_alive)] = read_all([raw])
    assert headers == {"Cache-Control": "max-age=60, private", "Set-Cookie": "a=1", "X-Long": "one two",
                       "Content-Length": "0"}
    assert (status, body, keep_alive) == (200, b"", True)


def test_interim_responses_are_skipped_and_http10_closes_unless_kept_alive():
    raw = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
           b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
           b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok")
    assert [(s, b, k) for s, _, b, k in read_all([raw])] == [(200, b"ok", False), (200, b"ok", True)]


def test_a_close_delimited_body_ends_with_the_connection_and_nothing_started_is_none():
    reader = ResponseReader()
    assert reader.at_close(100) is None
    reader.feed(b"HTTP/1.1 200 OK\r\n\r\nuntil ")
    reader.feed(b"the end")
    assert reader.next(100) is None and reader.delimited_by_close and reader.started
    assert reader.at_close(100) == (200, {}, b"until the end", False)


@pytest.mark.parametrize("raw, message", [
    (b"\x00\x17garbage\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 20 OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 200OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 200 O\x01K\r\n\r\n", "control character in the status line"),
    (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "101"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "not a header line"),
    (b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "not a header line"),
    (b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", "not a header line"),
    (b"HTTP/1.1 200 OK\r\n folded: first\r\n\r\n", "starts with whitespace"),
    (b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", "control character in a header value"),
    (b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "control character in a header value"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "both Transfer-Encoding"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "conflicting Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "not a Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5e3\r\n\r\n", "not a Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: \xd9\xa3\r\n\r\n", "not a Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\n", "not a Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not a chunk-size line"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", "not a chunk-size line"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", "over 15 hex digits"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n", "not followed by its line end"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n" + b"x" * 101, "body over the limit of 100 bytes"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n" + b"x" * 101, "body over the limit of 100"),
    (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 101, "body over the limit of 100 bytes"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"x" * 70000 + b"\r\n\r\n", "response headers over 65536 bytes"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + b"e" * 5000, "chunk-size line over 4096"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", "closed the connection mid-response"),
    (b"HTTP/1.1 200 OK\r\nContent-Le", "closed the connection mid-response"),
])
@pytest.mark.parametrize("cut", ["whole", "bytewise"])
def test_malformed_or_oversized_responses_are_refused_by_name(raw, message, cut):
    pieces = [raw] if cut == "whole" else [raw[i:i + 1] for i in range(len(raw))] if len(raw) < 6000 else \
        [raw[i:i + 997] for i in range(0, len(raw), 997)]
    with pytest.raises(ResponseError, match=message):
        read_all(pieces, max_body=100)


def test_an_oversized_head_is_refused_before_it_is_all_received():
    reader = ResponseReader(max_head_bytes=1000)
    reader.feed(b"HTTP/1.1 200 OK\r\nX: " + b"x" * 600)
    assert reader.next(100) is None
    reader.feed(b"y" * 600)          # no end of the head in sight, and over the bound: refused now
    with pytest.raises(ResponseError, match="response headers over 1000 bytes"):
        reader.next(100)


def test_a_known_head_reads_as_it_did_and_each_caller_gets_its_own_headers():
    raw = b"HTTP/1.1 200 OK\r\nX-Known: 1\r\nContent-Length: 2\r\n\r\nok"
    [first] = read_all([raw])
    known = known_heads()
    for _ in range(2):                                   # read as known, twice: each caller changes what it got
        first[1]["X-Known"] = "changed by its caller"
        del first[1]["Content-Length"]
        [first] = read_all([raw[:9], raw[9:]])
        assert first == (200, {"X-Known": "1", "Content-Length": "2"}, b"ok", True)
    assert known_heads() == known                        # nothing new remembered
    assert read_all([raw.replace(b"X-Known: 1", b"X-Known: 2")])[0][1]["X-Known"] == "2"
    assert known_heads() == known + 1 or known_heads() == 1   # (or forgotten at once, the memory full)


def test_head_is_the_head_of_the_response_given_last_when_it_is_remembered():
    first = b"HTTP/1.1 200 OK\r\nX-Head: 1\r\nContent-Length: 1\r\n\r\n"
    second = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
    long_head = b"HTTP/1.1 204 No Content\r\nX: " + b"x" * KNOWN_HEAD_BYTES + b"\r\n\r\n"
    reader = ResponseReader()
    assert reader.head is None
    reader.feed(first + b"a" + second + b"1\r\nb\r\n0\r\n\r\n" + long_head)
    for head, body in [(first, b"a"), (second, b"b"), (None, b"")]:
        response = reader.next(100)
        assert response[2] == body and reader.head == head
    reader.feed(b"HTTP/1.1 100 Continue\r\n\r\n" + first + b"z")
    assert reader.next(100)[2] == b"z" and reader.head == first   # (the interim head is not the response's)


def test_interim_long_and_refused_heads_are_not_remembered():
    read_all([b"HTTP/1.1 204 No Content\r\nX-Fill: 0\r\n\r\n"])
    known = known_heads()
    read_all([b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n"], close=False)
    long_head = b"HTTP/1.1 204 No Content\r\nX: " + b"x" * KNOWN_HEAD_BYTES + b"\r\n\r\n"
    assert read_all([long_head]) == [(204, {"X": "x" * KNOWN_HEAD_BYTES}, b"", True)]
    many_fields = b"HTTP/1.1 204 No Content\r\n" + b"".join(b"F%d: v\r\n" % i for i in range(KNOWN_HEAD_FIELDS + 1))
    assert len(read_all([many_fields + b"\r\n"])[0][1]) == KNOWN_HEAD_FIELDS + 1
    for _ in range(2):
        with pytest.raises(ResponseError, match="conflicting Content-Length"):
            read_all([b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx"])
    assert known_heads() == known


def test_the_known_heads_are_bounded():
    for i in range(KNOWN_HEADS_MAX + 10):
        read_all([b"HTTP/1.1 204 No Content\r\nX-Head: %d\r\n\r\n" % i])
        assert 1 <= known_heads() <= KNOWN_HEADS_MAX


def test_buffered_counts_the_bytes_after_the_last_response():
    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 2")
    assert reader.next(0) == (204, {}, b"", True)
    assert reader.buffered == len(b"HTTP/1.1 2")


# -- plain_get: the lean hit path's request heads ---------------------------------------------------------------------

from bloomwise._native.http1 import plain_get  # noqa: E402

TARGET = "http://origin.test:8080/doc/1?x=%20y#f"


def get_head(*lines, target=TARGET, start="GET {} HTTP/1.1"):
    return (start.format(target) + "\r\n" + "".join(f"{line}\r\n" for line in lines) + "\r\n").encode("latin-1")


def test_a_plain_get_gives_its_target_and_the_fields_the_lean_path_reads():
    head = get_head("Host: origin.test:8080", "cache-control:  no-store ", "User-Agent: wrk", "VIA: 1.1 a",
                    "Cache-Control: max-age=5", "Authorization: Basic eA==", "via: 1.1 b", "authorization: second",
                    "Content-Length: 0")
    assert plain_get(head) == (TARGET.encode(), b"no-store,max-age=5", b"1.1 a,1.1 b", b"Basic eA==")
    assert plain_get(get_head()) == (TARGET.encode(), None, None, None)


@pytest.mark.parametrize("head", [
    get_head(start="POST {} HTTP/1.1"), get_head(start="get {} HTTP/1.1"), get_head(start="GET {} HTTP/1.0"),
    get_head(start="GET  {} HTTP/1.1"), get_head(target="/doc/1"), get_head(target="https://origin.test/"),
    get_head(target='http://o.test/"q"'), get_head(target="http://o.test/<a>"), get_head(target="http://o.test/\x80"),
    get_head("Content-Length: 5"), get_head("Content-Length: 00"), get_head("Content-Length: 0", "Content-Length: 0"),
    get_head("Transfer-Encoding: chunked"),
    get_head("Connection: close"), get_head("connection: keep-alive"), get_head("Expect: 100-continue"),
    get_head("Pragma: no-cache"), get_head("Upgrade: websocket"), get_head("Proxy-Connection: keep-alive"),
    get_head("Keep-Alive: timeout=5"), get_head("TE: trailers"), get_head("Bad Name: x"), get_head(": x"),
    get_head("X-A: a\x01b"), get_head("X-A: a", " folded"), get_head("NoColon"),
    get_head("X-A: a").replace(b"X-A: a\r\n", b"X-A: a\n"), get_head()[:-2],
])
def test_anything_else_is_left_to_aiohttp(head):
    assert plain_get(head) is None


FIELD_NAME = st.sampled_from(["Host", "User-Agent", "Accept", "Cache-Control", "cache-control", "Via", "VIA",
                              "Authorization", "X-Trace", "Content-Length"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(FIELD_NAME, VALUE.filter(lambda v: "\x7f" not in v)), max_size=8),
       st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;=%", max_size=40))
def test_plain_get_reads_as_a_reference_reader_and_only_what_httptools_reads_as_a_kept_alive_get(fields, path):
    fields = [(n, "0" if n == "Content-Length" else v) for n, v in fields]
    target = "http://h.test/" + path
    head = get_head(*(f"{n}: {v}" for n, v in fields), target=target)
    if sum(n == "Content-Length" for n, _ in fields) > 1:   # llhttp refuses it: aiohttp's to answer
        assert plain_get(head) is None
        return
    joined = {}
    for name, value in fields:
        lower = name.lower()
        if lower in ("cache-control", "via"):
            joined[lower] = value if lower not in joined else joined[lower] + "," + value
        elif lower == "authorization":
            joined.setdefault(lower, value)
    expected = (target.encode(), *(joined[n].encode("latin-1") if n in joined else None
                                   for n in ("cache-control", "via", "authorization")))
    assert plain_get(head) == expected
    if httptools is not None:
        class Sink:
            url, done = b"", False

            def on_url(self, url):
                self.url += url

            def on_message_complete(self):
                self.done = True

        sink = Sink()
        parser = httptools.HttpRequestParser(sink)
        parser.feed_data(head)
        assert (sink.done, sink.url, parser.get_method(), parser.get_http_version(), parser.should_keep_alive()) \
            == (True, target.encode(), b"GET", "1.1", True)


#: pieces of responses and requests: a head of them (or arbitrary bytes), then arbitrary pieces, reach every
#: state of the readers
STATUS_LINES = st.sampled_from([b"HTTP/1.1 200 OK\r\n", b"HTTP/1.0 200 OK\r\n", b"HTTP/1.1 100 Continue\r\n",
                                b"HTTP/1.1 204 No Content\r\n", b"GET http://h.test/ HTTP/1.1\r\n"])
HEADER_LINES = st.sampled_from([b"Content-Length: 5\r\n", b"Transfer-Encoding: chunked\r\n", b"X: \x01\r\n",
                                b"Connection: close\r\n", b" folded\r\n", b"Cache-Control: no-store\r\n",
                                b"Bad Name: x\r\n", b"Content-Length: 5, 6\r\n"])
BODY_PIECES = st.sampled_from([b"\r\n", b"\n", b"5;e\r\nhello\r\n", b"0\r\n", b"zz\r\n", b"hello",
                               b"T: 1\r\n", b"HTTP/1.1 200 OK\r\n"])


@st.composite
def untrusted_streams(draw):
    head = [draw(STATUS_LINES)] + draw(st.lists(HEADER_LINES, max_size=3)) + [b"\r\n"]
    rest = draw(st.lists(st.one_of(st.binary(max_size=40), BODY_PIECES), max_size=8))
    return draw(st.sampled_from([head + rest, rest]))


@settings(max_examples=1000, deadline=None)
@given(untrusted_streams(), st.sampled_from([0, 10, 10**6]))
def test_arbitrary_bytes_are_read_or_refused_never_anything_else(pieces, max_body):
    """Untrusted input: whatever the bytes and their cuts, responses or a ResponseError (and plain_get: a tuple or
    None), never another exception."""
    reader = ResponseReader(max_head_bytes=128)
    try:
        for piece in pieces:
            reader.feed(piece)
            while reader.next(max_body) is not None:
                pass
        reader.at_close(max_body)
    except ResponseError:
        pass
    head = b"".join(pieces)
    for request in (head, b"GET http://h.test/ HTTP/1.1\r\n" + head + b"\r\n\r\n"):
        plain = plain_get(request)
        assert plain is None or (len(plain) == 4 and plain[0].startswith(b"http://"))
