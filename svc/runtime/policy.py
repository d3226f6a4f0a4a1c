"""Access-policy evaluation: decide what happens to one outbound HTTP request of an agent.

`compile_policy` turns a stored policy (the JSON form of `svc.definitions.AccessPolicy`)
into a `CompiledPolicy`; `evaluate` gives the `Verdict` for a method and URL; `read_back`
gives the spelling of GET /api/installs/:id/policies (spec "AccessPolicy").

Semantics (spec "AccessPolicy", "Security request log entry"):

- No policy: every request passes through (`passthrough`), the URL is not even parsed.
- Rules are tried top to bottom and the first whose given parts all match decides;
  `require_approval` becomes `judge`. No match: the default action, source `default`.
- A URL that cannot be parsed, is not http(s), or has no host is denied ("invalid URL",
  source None), whatever the rules say.

URL handling, chosen to match what the runtime's HTTP client (httpx, RFC 3986) contacts:

- Host: the part after the last `@` of the authority (userinfo is ignored, so
  `http://example.com@evil.org/` is evil.org), lowercased, IDNA-encoded (UTS 46 mapping)
  when not ASCII, one trailing dot stripped, port ignored. Hosts with characters outside
  `[a-z0-9-_.]`, empty labels, `%` or `\\` are invalid. A host ending in a numeric label
  must be an IPv4 address in some inet_aton spelling (`0x7f.1`, `2130706433`) and is
  matched in dotted-decimal form; IPv6 literals are matched compressed, without brackets,
  and an IPv4-mapped one (`[::ffff:127.0.0.1]`) as its IPv4 address.
- Host patterns: `example.com` is exact; `*.example.com` matches any subdomain at any
  depth (`a.b.example.com`) but neither the apex nor lookalikes (`evilexample.com`).
- Path (the part before `?`/`#`, `/` when empty) is normalised before the prefix test,
  and the rule's pathPrefix is normalised the same way: `%XX` of unreserved characters
  is decoded (`%2e` is `.`), other escapes are upper-cased (`%2f` -> `%2F`), characters
  not allowed raw in a path (space, non-ASCII, `"<>\\^`{|}[]`) are percent-encoded as
  UTF-8, empty segments are dropped (`//` -> `/`), and `.`/`..` segments are resolved
  (`..` never climbs above `/`). So `/api/../admin` and `/api/%2e%2e/admin` are `/admin`;
  a segment that is `.` or `..` before a `;` counts as one too (`/api/..;/admin`), as
  servers that strip path parameters before resolving read it.
  An encoded slash is data, not a separator (RFC 3986): `/api%2F..%2Fadmin` stays as it
  is and starts with `/api`. A malformed escape or an ASCII control character is invalid.
- pathPrefix is a plain string prefix of the normalised path: `/api` also matches
  `/apiary`; write `/api/` to mean the directory.
- Methods compare case-insensitively; an empty methods list matches no request.

Speed (no regex on the hot path): the class of a host is the exact rule host it equals,
else the longest rule wildcard suffix it ends with, else "". Hosts of one class meet the
same rules, so compiling precomputes, per (method, class), the rules that can match, in
order and ending in the default, as chunks of normalised prefixes: `str.startswith` on a
chunk's tuple rules ten rules out in one C call. An evaluation is one URL split, two dict
look-ups (a bounded memo by method and `host:port` as written; on a miss the host is
parsed and classified, a few set look-ups) and one `startswith` per chunk. Verdicts are
built at compile time and shared, so an evaluation allocates nothing for its result.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import idna

from svc.templates import AccessPolicy

Action = Literal["allow", "deny", "judge", "passthrough"]
Source = Literal["rule", "default"]

MAX_URL_LENGTH = 65_536
MAX_HOST_LENGTH = 253
CACHE_SIZE = 1024
MAX_METHODS = 32
HTTP_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))

UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Characters a normalised path keeps raw: pchar (minus pct-encoded) plus "/".
PATH_RAW = "".join(sorted(UNRESERVED | frozenset("!$&'()*+,;=:@/")))
HOST_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-._"
HEX = frozenset("0123456789abcdefABCDEF")
RULE_ACTIONS: dict[str, Action] = {"allow": "allow", "deny": "deny", "require_approval": "judge"}
READ_BACK_ACTIONS = {"allow": "ALLOW", "deny": "BLOCK", "require_approval": "JUDGE"}
READ_BACK_DEFAULTS = {"allow": "ALLOW", "deny": "BLOCK"}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with one request, and which part of the policy decided it."""

    action: Action
    source: Source | None
    rule_index: int | None
    reason: str | None


PASSTHROUGH = Verdict("passthrough", None, None, "no access policy")
INVALID_URL = Verdict("deny", None, None, "invalid URL")

Pairs = tuple[tuple[str, Verdict], ...]
# Rules that can match one (method, host class), in order, in chunks: (the chunk's prefixes,
# its (prefix, verdict) pairs). `str.startswith(tuple)` rules a whole chunk out in one C
# call; the last entry always matches (the default, or a rule with no pathPrefix).
Candidates = tuple[tuple[tuple[str, ...], Pairs], ...]
CHUNK = 10


def chunked(prefixes: tuple[str, ...], pairs: Pairs) -> Candidates:
    """Candidates from matching tuples of prefixes and (prefix, verdict) pairs, in chunks of CHUNK."""
    return tuple([(prefixes[i : i + CHUNK], pairs[i : i + CHUNK]) for i in range(0, len(pairs), CHUNK)])


INVALID_CANDIDATES = chunked(("",), (("", INVALID_URL),))


class CompiledRule(NamedTuple):
    """One rule, ready to test: host as exact name or `.suffix`, methods as an upper-case set."""

    exact_host: str | None
    host_suffix: str | None
    methods: frozenset[str] | None
    path_prefix: str
    verdict: Verdict


class CompiledPolicy:
    """A policy ready for `evaluate`: candidate lists precomputed per (method, host class)."""

    __slots__ = (
        "_by_method",
        "_exact_hosts",
        "_suffixes",
        "_table",
        "cache_size",
        "default",
        "report_only",
        "rules",
    )

    def __init__(
        self,
        rules: tuple[CompiledRule, ...],
        default: Verdict,
        cache_size: int = CACHE_SIZE,
        report_only: bool = False,
    ):
        self.rules = rules
        self.default = default
        self.cache_size = cache_size
        # Report mode (Smokescreen's report-only): decisions are logged, never enforced.
        self.report_only = report_only
        self._exact_hosts = frozenset(rule.exact_host for rule in rules if rule.exact_host is not None)
        self._suffixes = frozenset(rule.host_suffix for rule in rules if rule.host_suffix is not None)
        classes = ["", *sorted(self._exact_hosts), *sorted(self._suffixes)]
        self._table: dict[tuple[str, str], Candidates] = {}
        shared: dict[tuple[int, ...], dict[str, Candidates]] = {}
        for method in (*HTTP_METHODS, ""):
            accepting = tuple(
                index for index, rule in enumerate(rules) if rule.methods is None or method in rule.methods
            )
            if accepting not in shared:  # methods that accept the same rules share the lists
                by_key: dict[str | None, list[int]] = {}
                for index in accepting:
                    by_key.setdefault(rules[index].exact_host or rules[index].host_suffix, []).append(index)
                shared[accepting] = {c: self._candidates_for(by_key, c) for c in classes}
            for host_class, found in shared[accepting].items():
                self._table[method, host_class] = found
        self._by_method: dict[str, dict[str, Candidates]] = {}

    def _candidates_for(self, by_key: dict[str | None, list[int]], host_class: str) -> Candidates:
        """The rules (indices by host key) that a host of this class meets, in order, then the default."""
        chosen = list(by_key.get(None, ()))
        if host_class and not host_class.startswith("."):
            chosen += by_key.get(host_class, ())
        dot = host_class.find(".")
        while dot >= 0:
            chosen += by_key.get(host_class[dot:], ())
            dot = host_class.find(".", dot + 1)
        pairs: list[tuple[str, Verdict]] = []
        for index in sorted(chosen):
            rule = self.rules[index]
            pairs.append((rule.path_prefix, rule.verdict))
            if not rule.path_prefix:  # matches every path: nothing after it is reachable
                break
        else:
            pairs.append(("", self.default))
        return chunked(tuple(prefix for prefix, _ in pairs), tuple(pairs))

    def candidates(self, method: str, hostport: str) -> Candidates:
        """The candidates for this method and `host[:port]` (userinfo removed), memoised."""
        # Memo by (method as sent, `host[:port]` as written): up to `cache_size` entries per
        # method and MAX_METHODS methods. A miss parses and classifies the host (no rule scan).
        by_host = self._by_method.get(method)
        if by_host is not None:
            found = by_host.get(hostport)
            if found is not None:
                return found
        host = _host(hostport)
        if host is None:
            found = INVALID_CANDIDATES
        else:
            upper = method.upper()
            found = self._table[upper if upper in HTTP_METHODS else "", self._host_class(host)]
        if self.cache_size > 0:
            if by_host is None:
                if len(self._by_method) >= MAX_METHODS:
                    self._by_method.clear()
                by_host = self._by_method.setdefault(method, {})
            if len(by_host) >= self.cache_size:
                by_host.clear()
            by_host[hostport] = found
        return found

    def _host_class(self, host: str) -> str:
        if host in self._exact_hosts:
            return host
        if self._suffixes:
            dot = host.find(".")
            while dot >= 0:
                if host[dot:] in self._suffixes:
                    return host[dot:]
                dot = host.find(".", dot + 1)
        return ""


def compile_policy(
    policy: dict[str, Any] | AccessPolicy | None, cache_size: int = CACHE_SIZE
) -> CompiledPolicy | None:
    """Validate and compile a stored policy; None for no policy (ValueError if it is not valid)."""
    if policy is None:
        return None
    model = policy if isinstance(policy, AccessPolicy) else AccessPolicy.model_validate(policy)
    rules = []
    for index, rule in enumerate(model.rules):
        exact_host = host_suffix = None
        if rule.match.host is not None:
            if rule.match.host.startswith("*."):
                host_suffix = rule.match.host[1:]  # ".example.com": one label or more before it
            else:
                # A name no request can carry (`example.123`) stays literal and never matches.
                exact_host = normalise_host(rule.match.host) or rule.match.host
        prefix = ""
        if rule.match.pathPrefix is not None:
            normalised = normalise_path(rule.match.pathPrefix, lenient=True) or rule.match.pathPrefix
            prefix = "" if normalised == "/" else normalised
        methods = None if rule.match.methods is None else frozenset(m.upper() for m in rule.match.methods)
        verdict = Verdict(RULE_ACTIONS[rule.action], "rule", index, rule.reason)
        rules.append(CompiledRule(exact_host, host_suffix, methods, prefix, verdict))
    default = Verdict(model.defaultAction, "default", None, "no rule matched")
    return CompiledPolicy(tuple(rules), default, cache_size, report_only=model.mode == "report")


def evaluate(compiled: CompiledPolicy | None, method: str, url: str) -> Verdict:
    """The verdict for one request (see the module docstring for the matching rules)."""
    if compiled is None:
        return PASSTHROUGH
    split = _split(url)
    if split is None:
        return INVALID_URL
    hostport, path = split
    by_host = compiled._by_method.get(method)
    candidates = None if by_host is None else by_host.get(hostport)
    if candidates is None:
        candidates = compiled.candidates(method, hostport)
    for prefixes, pairs in candidates:
        if path.startswith(prefixes):
            for prefix, verdict in pairs:
                if path.startswith(prefix):
                    return verdict
    return compiled.default  # not reached: the last chunk always matches


def read_back(policy: dict[str, Any] | AccessPolicy | None) -> dict[str, Any] | None:
    """The GET /api/installs/:id/policies form of a stored policy; None for no policy."""
    if policy is None:
        return None
    model = policy if isinstance(policy, AccessPolicy) else AccessPolicy.model_validate(policy)
    rules = []
    for rule in model.rules:
        item: dict[str, Any] = {"hosts": [rule.match.host or "*"], "action": READ_BACK_ACTIONS[rule.action]}
        if rule.match.methods is not None:
            item["methods"] = list(rule.match.methods)
        if rule.match.pathPrefix is not None:
            item["pathPrefix"] = rule.match.pathPrefix
        if rule.reason is not None:
            item["reason"] = rule.reason
        rules.append(item)
    return {"defaultAction": READ_BACK_DEFAULTS[model.defaultAction], "rules": rules, "mode": model.mode}


def parse_url(url: str) -> tuple[str, str] | None:
    """(normalised host, normalised path) of an absolute http(s) URL, or None when it is invalid."""
    split = _split(url)
    if split is None:
        return None
    host = _host(split[0])
    return None if host is None else (host, split[1])


def _split(url: str) -> tuple[str, str] | None:
    """(`host[:port]` as written, normalised path) of an absolute http(s) URL, or None."""
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH:
        return None
    if not url.isprintable():
        for char in url:
            if char.isascii() and not char.isprintable():
                return None
    if url.startswith("https://"):
        start = 8
    elif url.startswith("http://"):
        start = 7
    else:
        colon = url.find(":")
        if colon < 0 or url[:colon].lower() not in ("http", "https") or not url.startswith("//", colon + 1):
            return None
        start = colon + 3
    path_end = url.find("?", start)
    if path_end < 0:
        path_end = len(url)
    fragment = url.find("#", start, path_end)
    if fragment >= 0:
        path_end = fragment
    authority_end = url.find("/", start, path_end)
    if authority_end < 0:
        authority_end = path_end
    if url.find("\\", start, authority_end) >= 0:
        return None
    at = url.rfind("@", start, authority_end)
    hostport = url[at + 1 if at >= 0 else start : authority_end]
    if authority_end == path_end:
        return hostport, "/"
    path = url[authority_end:path_end]
    if "%" in path or "/." in path or "//" in path or not path.isascii() or path.strip(PATH_RAW):
        normalised = normalise_path(path)
        if normalised is None:
            return None
        return hostport, normalised
    return hostport, path


def _host(hostport: str) -> str | None:
    """The normalised host of `host[:port]` (userinfo already removed), or None."""
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0 or "%" in hostport or not _valid_port(hostport[close + 1 :]):
            return None
        try:
            address = ipaddress.IPv6Address(hostport[1:close])
        except ValueError:
            return None
        return str(address.ipv4_mapped) if address.ipv4_mapped else address.compressed
    colon = hostport.find(":")
    if colon >= 0:
        if not _valid_port(hostport[colon:]):
            return None
        hostport = hostport[:colon]
    return normalise_host(hostport)


def _valid_port(text: str) -> bool:
    """Whether the text after the host is empty or `:` followed by at most 5 digits <= 65535."""
    if not text:
        return True
    port = text[1:]
    if text[0] != ":" or len(port) > 5 or not (port.isascii() and (port.isdigit() or not port)):
        return False
    return not port or int(port) <= 65535


def normalise_host(host: str) -> str | None:
    """Lowercase, IDNA-encode, strip one trailing dot, canonicalise IPv4; None when it is not a host."""
    if not host:
        return None
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            return None
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if (
        not host
        or len(host) > MAX_HOST_LENGTH
        or host.strip(HOST_CHARS)
        or host.startswith(".")
        or host.endswith(".")
        or ".." in host
    ):
        return None
    last = host[host.rfind(".") + 1 :]
    if last.isdigit() or (last.startswith("0x") and last[2:].strip("0123456789abcdef") == ""):
        return canonical_ipv4(host)
    return host


def canonical_ipv4(host: str) -> str | None:
    """Dotted-decimal form of an IPv4 address in any inet_aton spelling, or None."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    numbers = []
    for part in parts:
        if part.startswith("0x"):
            digits, base = part[2:] or "0", 16
            if digits.strip("0123456789abcdef"):
                return None
        elif len(part) > 1 and part.startswith("0"):
            digits, base = part[1:], 8
            if digits.strip("01234567"):
                return None
        else:
            digits, base = part, 10
            if not part or part.strip("0123456789"):
                return None
        numbers.append(int(digits, base))
    last_bits = 8 * (5 - len(numbers))
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 1 << last_bits:
        return None
    value = numbers[-1]
    for position, number in enumerate(numbers[:-1]):
        value |= number << (24 - 8 * position)
    return str(ipaddress.IPv4Address(value))


def normalise_path(path: str, lenient: bool = False) -> str | None:
    """Canonical form of a URL path, or None if malformed (`lenient`, for prefixes: encode instead)."""
    if not path.startswith("/"):
        return None
    out: list[str] = []
    index, length = 0, len(path)
    while index < length:
        char = path[index]
        if char == "%":
            escape = path[index + 1 : index + 3]
            if len(escape) != 2 or escape[0] not in HEX or escape[1] not in HEX:
                if not lenient:
                    return None
                out.append("%25")
                index += 1
                continue
            decoded = chr(int(escape, 16))
            out.append(decoded if decoded in UNRESERVED else "%" + escape.upper())
            index += 3
            continue
        if char in PATH_RAW:
            out.append(char)
        elif char.isascii() and not char.isprintable() and not lenient:
            return None
        else:
            try:
                out.extend(f"%{byte:02X}" for byte in char.encode("utf-8"))
            except UnicodeEncodeError:  # a lone surrogate
                return None
        index += 1
    segments = "".join(out).split("/")
    kept: list[str] = []
    for segment in segments[1:]:
        dots = segment.partition(";")[0]  # `..;x` is `..` to servers that strip path parameters
        if dots in ("", "."):
            if dots or not segment:
                continue
        elif dots == "..":
            if kept:
                kept.pop()
            continue
        kept.append(segment)
    if not kept:
        return "/"
    last = segments[-1].partition(";")[0]
    trailing = "/" if last in ("", ".", "..") and (last or not segments[-1]) else ""
    return "/" + "/".join(kept) + trailing
