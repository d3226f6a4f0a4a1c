"""Access-policy evaluation (spec "AccessPolicy", "Security request log entry"): host wildcards,
methods, normalised path prefixes, first match wins, defaults, invalid URLs, and the read-back form."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from svc.runtime.policy import (
    INVALID_URL,
    MAX_HOST_LENGTH,
    MAX_URL_LENGTH,
    PASSTHROUGH,
    Verdict,
    canonical_ipv4,
    compile_policy,
    evaluate,
    normalise_path,
    parse_url,
    read_back,
)


def rule(action: str = "allow", reason: str | None = None, **match: Any) -> dict[str, Any]:
    """One rule; `match` takes host, methods and pathPrefix."""
    body: dict[str, Any] = {"match": match, "action": action}
    if reason is not None:
        body["reason"] = reason
    return body


def policy(*rules: dict[str, Any], default: str = "deny") -> dict[str, Any]:
    """A stored policy (the JSON form of svc.definitions.AccessPolicy)."""
    return {"accessPolicyVersion": "1", "defaultAction": default, "rules": list(rules)}


Decision = tuple[str, str | None, int | None]


def decide(stored: dict[str, Any] | None, url: str, method: str = "GET") -> Decision:
    """(action, source, rule index) for one request."""
    verdict = evaluate(compile_policy(stored), method, url)
    return verdict.action, verdict.source, verdict.rule_index


ALLOWED_BY_RULE_0 = ("allow", "rule", 0)
DEFAULT_DENY = ("deny", "default", None)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.example.com/", ALLOWED_BY_RULE_0),
        ("https://a.b.c.example.com/x", ALLOWED_BY_RULE_0),
        ("https://API.Example.COM/", ALLOWED_BY_RULE_0),
        ("https://api.example.com./", ALLOWED_BY_RULE_0),
        ("https://api.example.com:8443/", ALLOWED_BY_RULE_0),
        ("https://api.example.com.:8443/", ALLOWED_BY_RULE_0),
        ("https://api.example.com", ALLOWED_BY_RULE_0),
        ("https://user:pw@api.example.com/", ALLOWED_BY_RULE_0),
        ("https://example.com/", DEFAULT_DENY),  # the apex is not a subdomain
        ("https://example.com./", DEFAULT_DENY),
        ("https://evilexample.com/", DEFAULT_DENY),
        ("https://api.evilexample.com/", DEFAULT_DENY),
        ("https://example.com.evil.org/", DEFAULT_DENY),
        ("https://api.example.com.evil.org/", DEFAULT_DENY),
        ("https://example.co/", DEFAULT_DENY),
        ("https://api.example.com@evil.org/", DEFAULT_DENY),
        ("https://api-example.com/", DEFAULT_DENY),
    ],
)
def test_a_wildcard_matches_any_subdomain_not_the_apex_or_lookalikes(url: str, expected: Decision) -> None:
    assert decide(policy(rule(host="*.example.com")), url) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://example.com/", ALLOWED_BY_RULE_0),
        ("http://EXAMPLE.COM/", ALLOWED_BY_RULE_0),
        ("http://Example.Com./path", ALLOWED_BY_RULE_0),
        ("http://example.com:80/", ALLOWED_BY_RULE_0),
        ("http://example.com:8080/", ALLOWED_BY_RULE_0),
        ("http://example.com:/", ALLOWED_BY_RULE_0),  # an empty port is allowed by RFC 3986
        ("HTTPS://example.com/", ALLOWED_BY_RULE_0),
        ("http://example.com?q=1", ALLOWED_BY_RULE_0),
        ("http://example.com#top", ALLOWED_BY_RULE_0),
        ("http://www.example.com/", DEFAULT_DENY),
        ("http://example.com.evil.org/", DEFAULT_DENY),
        ("http://evilexample.com/", DEFAULT_DENY),
        ("http://xn--example-.com/", DEFAULT_DENY),
    ],
)
def test_an_exact_host_ignores_case_trailing_dot_and_port(url: str, expected: Decision) -> None:
    assert decide(policy(rule(host="example.com")), url) == expected


def test_rule_hosts_are_compared_lowercased() -> None:
    assert decide(policy(rule(host="API.Example.com")), "http://api.example.COM/") == ALLOWED_BY_RULE_0
    assert decide(policy(rule(host="*.Example.COM")), "http://a.EXAMPLE.com/") == ALLOWED_BY_RULE_0


@pytest.mark.parametrize(
    ("url", "real_host"),
    [
        ("http://example.com@evil.org/", "evil.org"),
        ("http://example.com:80@evil.org/", "evil.org"),
        ("http://user:example.com@evil.org/", "evil.org"),
        ("http://a@example.com@evil.org/", "evil.org"),  # the last @ ends the userinfo
        ("http://evil.org#@example.com/", "evil.org"),  # the fragment ends the authority
        ("http://evil.org?@example.com/", "evil.org"),
        ("http://evil.org/@example.com/", "evil.org"),
        ("http://evil.org/?next=http://example.com/", "evil.org"),
    ],
)
def test_userinfo_and_lookalike_authorities_are_judged_by_the_real_host(url: str, real_host: str) -> None:
    stored = policy(rule("deny", host="evil.org"), rule(host="example.com"), default="allow")
    assert parse_url(url) is not None and parse_url(url)[0] == real_host  # type: ignore[index]
    assert decide(stored, url) == ("deny", "rule", 0)


@pytest.mark.parametrize(
    ("method", "matches"),
    [
        ("GET", True),
        ("get", True),
        ("Get", True),
        ("HEAD", True),
        ("POST", False),
        ("DELETE", False),
        ("TRACE", False),
        ("", False),
    ],
)
def test_methods_compare_case_insensitively(method: str, matches: bool) -> None:
    stored = policy(rule(host="example.com", methods=["GET", "HEAD"]))
    expected = ALLOWED_BY_RULE_0 if matches else DEFAULT_DENY
    assert decide(stored, "https://example.com/", method) == expected


def test_a_rule_without_methods_matches_any_method_and_an_empty_list_matches_none() -> None:
    for method in ("GET", "post", "TRACE", "BREW"):
        assert decide(policy(rule()), "https://x.org/", method) == ALLOWED_BY_RULE_0
        assert decide(policy(rule(methods=[])), "https://x.org/", method) == DEFAULT_DENY


def test_the_same_compiled_policy_answers_each_method_separately() -> None:
    compiled = compile_policy(policy(rule(host="example.com", methods=["POST"]), default="allow"))
    for _ in range(2):  # the second round hits the memoised candidates
        assert evaluate(compiled, "post", "https://example.com/").source == "rule"
        assert evaluate(compiled, "GET", "https://example.com/").source == "default"
        assert evaluate(compiled, "POST", "https://example.com/").source == "rule"


@pytest.mark.parametrize(
    ("path", "matches"),
    [
        ("/api", True),
        ("/api/", True),
        ("/api/v1/items", True),
        ("/apiary", True),  # a plain string prefix: write `/api/` for the directory
        ("/api?x=1", True),
        ("/API", False),  # paths are case-sensitive
        ("/", False),
        ("", False),
        ("/admin", False),
        ("/admin?next=/api", False),
        ("/admin#/api", False),
        ("/v1/api", False),
        ("//api/x", True),  # `//` collapses
        ("/./api/x", True),
        ("/x/../api/y", True),
        ("/%61pi/x", True),  # %61 is an unreserved `a`
        ("/%61%70%69", True),
        ("/api/./x", True),
        ("/api/../admin", False),  # traversal out of the prefix
        ("/api/x/../../admin", False),
        ("/api/%2e%2e/admin", False),  # encoded dots are dots
        ("/api/%2E%2E/admin", False),
        ("/api/.%2e/admin", False),
        ("/api/..;/admin", False),  # a dot segment with a path parameter
        ("/api/..", False),
        ("/../api/x", True),  # `..` never climbs above the root
        ("/api%2F..%2Fadmin", True),  # an encoded slash is data, not a separator
        ("/api/..%2Fadmin", True),
        ("/api%2fx", True),
        ("/ap%69/x", True),
    ],
)
def test_path_prefix_is_tested_on_the_normalised_path(path: str, matches: bool) -> None:
    stored = policy(rule(host="example.com", pathPrefix="/api"))
    expected = ALLOWED_BY_RULE_0 if matches else DEFAULT_DENY
    assert decide(stored, f"https://example.com{path}") == expected


@pytest.mark.parametrize(
    ("prefix", "path", "matches"),
    [
        ("/api/", "/api", False),
        ("/api/", "/api/", True),
        ("/api/", "/apiary", False),
        ("/api/", "/api//x", True),
        ("/a%2Fb", "/a%2fb/c", True),  # escapes compare upper-cased
        ("/a%2fb", "/a%2Fb", True),
        ("/a%2Fb", "/a/b", False),
        ("/%7Euser", "/~user/x", True),  # the prefix is normalised too
        ("/~user", "/%7euser", True),
        ("/a/../b", "/b/c", True),
        ("/docs//v1", "/docs/v1/x", True),
        ("/", "/anything", True),
        ("/caf\u00e9", "/caf%C3%A9/menu", True),
        ("/caf%C3%A9", "/caf\u00e9", True),
        ("/a b", "/a%20b", True),
        ("/100%", "/100%25", True),  # a stray % in a prefix means a literal %
    ],
)
def test_path_prefixes_are_normalised_the_same_way(prefix: str, path: str, matches: bool) -> None:
    stored = policy(rule(pathPrefix=prefix))
    expected = ALLOWED_BY_RULE_0 if matches else DEFAULT_DENY
    assert decide(stored, f"https://example.com{path}") == expected


@pytest.mark.parametrize(
    ("path", "normalised"),
    [
        ("/", "/"),
        ("/a/b/", "/a/b/"),
        ("/a//b//", "/a/b/"),
        ("/a/./b/.", "/a/b/"),
        ("/a/b/..", "/a/"),
        ("/..", "/"),
        ("/../..", "/"),
        ("/a/%2e%2E/b", "/b"),
        ("/%41%7a%2D%5f%7E", "/Az-_~"),
        ("/a%2fb%3a", "/a%2Fb%3A"),
        ("/.well-known/x", "/.well-known/x"),
        ("/a/...", "/a/..."),
        ("/a/;x/b", "/a/;x/b"),
        ("/a/.;x", "/a/"),
        ('/a b"<>', "/a%20b%22%3C%3E"),
        ("/\u00fc", "/%C3%BC"),
        ("/a\\..\\b", "/a%5C..%5Cb"),
        ("/a%zz", None),
        ("/a%4", None),
        ("/a%", None),
        ("/a\tb", None),
        ("a/b", None),
    ],
)
def test_normalise_path(path: str, normalised: str | None) -> None:
    assert normalise_path(path) == normalised


def test_the_first_matching_rule_wins() -> None:
    stored = policy(
        rule("deny", host="admin.example.com", reason="admin is off limits"),
        rule("require_approval", host="*.example.com", methods=["POST"]),
        rule("allow", host="*.example.com"),
        rule("deny", host="api.example.com", reason="never reached"),
        default="deny",
    )
    compiled = compile_policy(stored)
    assert evaluate(compiled, "GET", "https://admin.example.com/") == Verdict(
        "deny", "rule", 0, "admin is off limits"
    )
    assert evaluate(compiled, "POST", "https://admin.example.com/") == Verdict(
        "deny", "rule", 0, "admin is off limits"
    )
    assert evaluate(compiled, "POST", "https://api.example.com/") == Verdict("judge", "rule", 1, None)
    assert evaluate(compiled, "GET", "https://api.example.com/") == Verdict("allow", "rule", 2, None)
    assert evaluate(compiled, "GET", "https://example.com/") == Verdict(
        "deny", "default", None, "no rule matched"
    )


def test_order_decides_between_overlapping_rules() -> None:
    deny_first = policy(rule("deny", pathPrefix="/api/admin"), rule("allow", pathPrefix="/api"))
    allow_first = policy(rule("allow", pathPrefix="/api"), rule("deny", pathPrefix="/api/admin"))
    assert decide(deny_first, "https://x.org/api/admin/users") == ("deny", "rule", 0)
    assert decide(deny_first, "https://x.org/api/users") == ("allow", "rule", 1)
    assert decide(allow_first, "https://x.org/api/admin/users") == ("allow", "rule", 0)


def test_a_rule_matches_only_when_every_part_matches() -> None:
    stored = policy(rule(host="example.com", methods=["POST"], pathPrefix="/upload"), default="allow")
    compiled = compile_policy(stored)
    assert evaluate(compiled, "POST", "https://example.com/upload/1").source == "rule"
    assert evaluate(compiled, "GET", "https://example.com/upload/1").source == "default"
    assert evaluate(compiled, "POST", "https://example.com/download").source == "default"
    assert evaluate(compiled, "POST", "https://other.com/upload/1").source == "default"


@pytest.mark.parametrize("default", ["allow", "deny"])
def test_no_match_takes_the_default_action(default: str) -> None:
    stored = policy(rule("deny", host="blocked.org"), rule("allow", host="open.org"), default=default)
    assert evaluate(compile_policy(stored), "GET", "https://elsewhere.net/") == Verdict(
        default, "default", None, "no rule matched"
    )


def test_the_default_default_is_allow() -> None:
    stored = {"accessPolicyVersion": "1", "rules": [rule("deny", host="blocked.org")]}
    assert decide(stored, "https://elsewhere.net/") == ("allow", "default", None)
    assert decide({"accessPolicyVersion": "1"}, "https://elsewhere.net/") == ("allow", "default", None)


def test_require_approval_sends_the_request_to_the_judge_with_its_reason() -> None:
    stored = policy(rule("require_approval", host="*.bank.com", reason="money moves"))
    assert evaluate(compile_policy(stored), "POST", "https://api.bank.com/transfer") == Verdict(
        "judge", "rule", 0, "money moves"
    )


@pytest.mark.parametrize(
    "url", ["https://example.com/", "http://anything", "not a url", "", "ftp://example.com/"]
)
def test_no_policy_passes_every_request_through(url: str) -> None:
    assert compile_policy(None) is None
    assert evaluate(None, "GET", url) == PASSTHROUGH
    assert evaluate(None, "GET", url) == Verdict("passthrough", None, None, "no access policy")


@pytest.mark.parametrize(
    "url",
    [
        "",
        "not a url",
        "example.com/path",
        "//example.com/",
        "/relative/path",
        "ftp://example.com/",
        "file:///etc/passwd",
        "mailto:someone@example.com",
        "javascript:alert(1)",
        "http:example.com",
        "http:/example.com",
        "http://",
        "http:///path",
        "http://?x=1",
        "http://#x",
        "http://user@/",
        "http://:80/",
        "http://example.com:abc/",
        "http://example.com:99999/",
        "http://example.com:-1/",
        "http://example.com:80:80/",
        "http://exa mple.com/",
        " http://example.com/",
        "http://example.com/\n",
        "http://example.com/a\tb",
        "http://exam\x00ple.com/",
        "http://ex%61mple.com/",
        "http://example..com/",
        "http://.example.com/",
        "http://example.com../",
        "http://*.example.com/",
        "http://exa_mple.com\\@evil.org/",
        "http://evil.org\\@example.com/",
        "http://[::1/",
        "http://[zz::1]/",
        "http://[::1]x/",
        "http://[fe80::1%25eth0]/",
        "http://example.123/",
        "http://1.2.3.4.5/",
        "http://256.256.256.256/",
        "http://1.2.3.09/",
        "http://-1.2.3.4/",
        "http://example.com/a%zz",
        "http://example.com/a%",
        "http://" + "a" * 254 + "/",
        "http://example.com/" + "a" * 70_000,
    ],
)
def test_an_invalid_url_is_denied_whatever_the_rules(url: str) -> None:
    stored = policy(rule("allow"), default="allow")
    assert evaluate(compile_policy(stored), "GET", url) == INVALID_URL
    assert INVALID_URL == Verdict("deny", None, None, "invalid URL")
    assert parse_url(url) is None


def test_a_non_string_url_is_invalid() -> None:
    assert evaluate(compile_policy(policy(default="allow")), "GET", None) == INVALID_URL  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "host", "path"),
    [
        ("https://example.com", "example.com", "/"),
        ("https://example.com?x", "example.com", "/"),
        ("HtTpS://Example.COM./A/b?Q=1#F", "example.com", "/A/b"),
        ("http://u:p@example.com:8080/x", "example.com", "/x"),
        ("http://b\u00fccher.example/", "xn--bcher-kva.example", "/"),
        ("http://B\u00dcCHER.example/", "xn--bcher-kva.example", "/"),
        ("http://\u0441\u0430\u0439\u0442.\u0440\u0444/", "xn--80aswg.xn--p1ai", "/"),
        ("http://127.0.0.1/", "127.0.0.1", "/"),
        ("http://0x7f.1/", "127.0.0.1", "/"),
        ("http://127.1/", "127.0.0.1", "/"),
        ("http://2130706433/", "127.0.0.1", "/"),
        ("http://0177.0.0.1/", "127.0.0.1", "/"),
        ("http://0x7F000001/", "127.0.0.1", "/"),
        ("http://[::1]:8080/x", "::1", "/x"),
        ("http://[0:0:0:0:0:0:0:1]/", "::1", "/"),
        ("http://[2001:DB8::1]/", "2001:db8::1", "/"),
        ("http://[::ffff:127.0.0.1]/", "127.0.0.1", "/"),
        ("http://[::FFFF:7f00:1]:80/", "127.0.0.1", "/"),
        ("http://my_host.internal/", "my_host.internal", "/"),
        ("http://1e100.net/", "1e100.net", "/"),
    ],
)
def test_parse_url_normalises_host_and_path(url: str, host: str, path: str) -> None:
    assert parse_url(url) == (host, path)


@pytest.mark.parametrize(
    "url",
    [
        "http://0x7f.1/",
        "http://127.1/",
        "http://2130706433/",
        "http://0177.0.0.1/",
        "http://127.0.0.1:9/",
        "http://127.0.0.1./",
        "http://[::ffff:127.0.0.1]/",
    ],
)
def test_an_address_rule_matches_every_spelling_of_the_address(url: str) -> None:
    assert decide(policy(rule("deny", host="127.0.0.1"), default="allow"), url) == ("deny", "rule", 0)


def test_idn_hosts_match_their_punycode_rules() -> None:
    stored = policy(rule(host="xn--bcher-kva.example"), rule(host="*.xn--bcher-kva.example"))
    assert decide(stored, "https://b\u00fccher.example/") == ("allow", "rule", 0)
    assert decide(stored, "https://shop.b\u00fccher.example/") == ("allow", "rule", 1)
    assert decide(stored, "https://bucher.example/") == DEFAULT_DENY


def test_the_wildcard_does_not_match_a_subdomain_of_a_lookalike_apex() -> None:
    stored = policy(rule(host="*.bank.com"))
    for url in (
        "https://mybank.com/",
        "https://api.mybank.com/",
        "https://bank.com.attacker.net/",
        "https://bank.com/",
        "https://xbank.com/",
    ):
        assert decide(stored, url) == DEFAULT_DENY, url


def test_a_match_far_down_a_long_policy() -> None:
    rules = [
        rule("deny", host=f"h{i}.example.com", methods=["GET"], pathPrefix=f"/p{i}/") for i in range(100)
    ]
    compiled = compile_policy(policy(*rules, default="allow"))
    assert evaluate(compiled, "GET", "https://h50.example.com/p50/x").rule_index == 50
    assert evaluate(compiled, "GET", "https://h99.example.com/p99/").rule_index == 99
    assert evaluate(compiled, "GET", "https://h50.example.com/p51/x").source == "default"
    same_host = [rule("deny", host="api.example.com", pathPrefix=f"/p{i}/") for i in range(100)]
    compiled = compile_policy(policy(*same_host, default="allow"))
    for index in (0, 9, 10, 11, 50, 99):
        assert evaluate(compiled, "GET", f"https://api.example.com/p{index}/x").rule_index == index
    assert evaluate(compiled, "GET", "https://api.example.com/q/").source == "default"


def test_memoisation_does_not_change_verdicts() -> None:
    stored = policy(
        rule("deny", host="*.example.com", pathPrefix="/admin"),
        rule("require_approval", methods=["POST"]),
        rule("allow", host="example.com"),
        default="deny",
    )
    cached, uncached = compile_policy(stored), compile_policy(stored, cache_size=0)
    urls = [
        "https://example.com/admin",
        "https://a.example.com/admin/x",
        "https://a.example.com/x",
        "https://other.org/",
        "https://EXAMPLE.com:443/",
        "bad url",
    ]
    for _ in range(3):
        for method in ("GET", "POST", "post"):
            for url in urls:
                assert evaluate(cached, method, url) == evaluate(uncached, method, url), (method, url)


def test_the_memo_is_bounded() -> None:
    compiled = compile_policy(policy(rule(host="*.example.com")), cache_size=8)
    assert compiled is not None
    for index in range(50):
        assert evaluate(compiled, "GET", f"https://h{index}.example.com/").action == "allow"
    for method in (f"M{index}" for index in range(100)):
        evaluate(compiled, method, "https://a.example.com/")
    assert len(compiled._by_method) <= 32
    assert all(len(by_host) <= 8 for by_host in compiled._by_method.values())


def test_verdicts_are_frozen_and_shared() -> None:
    compiled = compile_policy(policy(rule(host="example.com")))
    first = evaluate(compiled, "GET", "https://example.com/a")
    assert evaluate(compiled, "GET", "https://example.com/b") is first
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.action = "deny"  # type: ignore[misc]


@pytest.mark.parametrize(
    "stored",
    [
        {"defaultAction": "allow", "rules": []},  # no version
        {"accessPolicyVersion": "2", "rules": []},
        policy(default="block"),
        policy(rule("block")),
        policy(rule(host="exa*mple.com")),
        policy(rule(host="*example.com")),
        policy(rule(host="example.com/path")),
        policy(rule(methods=["FETCH"])),
        policy(rule(pathPrefix="api")),
        policy(*[rule() for _ in range(101)]),
    ],
)
def test_an_invalid_policy_is_refused(stored: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        compile_policy(stored)
    with pytest.raises(ValueError):
        read_back(stored)


def test_read_back_of_no_policy_is_none() -> None:
    assert read_back(None) is None


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ({"accessPolicyVersion": "1"}, {"defaultAction": "ALLOW", "rules": []}),
        (policy(default="deny"), {"defaultAction": "BLOCK", "rules": []}),
        (policy(default="allow"), {"defaultAction": "ALLOW", "rules": []}),
        (
            policy(rule("allow", host="api.example.com")),
            {"defaultAction": "BLOCK", "rules": [{"hosts": ["api.example.com"], "action": "ALLOW"}]},
        ),
        (
            policy(rule("deny", host="*.Evil.org")),
            {"defaultAction": "BLOCK", "rules": [{"hosts": ["*.evil.org"], "action": "BLOCK"}]},
        ),
        (
            policy(rule("require_approval")),
            {"defaultAction": "BLOCK", "rules": [{"hosts": ["*"], "action": "JUDGE"}]},
        ),
        (
            policy(rule("deny", reason="no uploads", methods=["POST", "PUT"], pathPrefix="/upload")),
            {
                "defaultAction": "BLOCK",
                "rules": [
                    {
                        "hosts": ["*"],
                        "action": "BLOCK",
                        "methods": ["POST", "PUT"],
                        "pathPrefix": "/upload",
                        "reason": "no uploads",
                    }
                ],
            },
        ),
        (
            policy(rule("allow", host="example.com", methods=[])),
            {
                "defaultAction": "BLOCK",
                "rules": [{"hosts": ["example.com"], "action": "ALLOW", "methods": []}],
            },
        ),
        (
            policy(
                rule("allow", host="a.org", pathPrefix="/v1/"),
                rule("require_approval", host="b.org", reason="ask"),
                default="allow",
            ),
            {
                "defaultAction": "ALLOW",
                "rules": [
                    {"hosts": ["a.org"], "action": "ALLOW", "pathPrefix": "/v1/"},
                    {"hosts": ["b.org"], "action": "JUDGE", "reason": "ask"},
                ],
            },
        ),
    ],
)
def test_read_back_has_the_spec_shape(stored: dict[str, Any], expected: dict[str, Any]) -> None:
    assert read_back(stored) == {**expected, "mode": "enforce"}


def test_read_back_drops_unknown_fields_and_keeps_explicit_nulls_out() -> None:
    stored = policy(default="allow")
    stored["rules"] = [
        {
            "match": {"host": "a.org", "methods": None, "pathPrefix": None, "extra": 1},
            "action": "deny",
            "reason": None,
            "note": "x",
        }
    ]
    stored["owner"] = "someone"
    assert read_back(stored) == {
        "defaultAction": "ALLOW",
        "rules": [{"hosts": ["a.org"], "action": "BLOCK"}],
        "mode": "enforce",
    }


def test_read_back_keeps_rule_order_and_method_order() -> None:
    stored = policy(*[rule(host=f"h{i}.org", methods=["PUT", "GET"]) for i in range(5)])
    back = read_back(stored)
    assert back is not None
    assert [item["hosts"] for item in back["rules"]] == [[f"h{i}.org"] for i in range(5)]
    assert all(item["methods"] == ["PUT", "GET"] for item in back["rules"])


def test_compile_and_read_back_do_not_modify_the_stored_policy() -> None:
    stored = policy(rule("deny", host="*.Example.com", methods=["GET"], pathPrefix="/a/../b"))
    snapshot = repr(stored)
    compile_policy(stored)
    read_back(stored)
    assert repr(stored) == snapshot


def reference(stored: dict[str, Any], method: str, url: str) -> tuple[str, str | None, int | None]:
    """A plain rule-by-rule evaluation to check the precomputed lists against."""
    parsed = parse_url(url)
    if parsed is None:
        return "deny", None, None
    host, path = parsed
    actions = {"allow": "allow", "deny": "deny", "require_approval": "judge"}
    for index, item in enumerate(stored["rules"]):
        match = item["match"]
        pattern = match.get("host")
        if pattern is not None:
            pattern = pattern.lower()
            if pattern.startswith("*."):
                if not host.endswith(pattern[1:]):
                    continue
            elif host != pattern:
                continue
        if match.get("methods") is not None and method.upper() not in match["methods"]:
            continue
        prefix = match.get("pathPrefix")
        if prefix is not None and not path.startswith(normalise_path(prefix) or prefix):
            continue
        return actions[item["action"]], "rule", index
    return stored["defaultAction"], "default", None


@pytest.mark.parametrize("seed", range(12))
def test_precomputed_candidates_agree_with_a_plain_evaluation(seed: int) -> None:
    generator = random.Random(seed)
    host_patterns = [
        None,
        "example.com",
        "*.example.com",
        "api.example.com",
        "*.api.example.com",
        "*.com",
        "other.org",
        "*.other.org",
        "a.b.other.org",
        "127.0.0.1",
    ]
    method_sets = [None, None, ["GET"], ["POST", "PUT"], ["DELETE"], []]
    prefixes = [None, None, "/", "/api", "/api/", "/api/v1", "/admin", "/a/../api"]
    rules = [
        {
            "match": {
                key: value
                for key, value in (
                    ("host", generator.choice(host_patterns)),
                    ("methods", generator.choice(method_sets)),
                    ("pathPrefix", generator.choice(prefixes)),
                )
                if value is not None
            },
            "action": generator.choice(["allow", "deny", "require_approval"]),
        }
        for _ in range(generator.randint(1, 40))
    ]
    stored = policy(*rules, default=generator.choice(["allow", "deny"]))
    hosts = [
        "example.com",
        "api.example.com",
        "x.api.example.com",
        "y.example.com",
        "evilexample.com",
        "example.com.evil.org",
        "other.org",
        "a.b.other.org",
        "z.a.b.other.org",
        "unknown.net",
        "EXAMPLE.com.",
        "api.example.com:8443",
        "u@other.org",
        "0x7f.1",
    ]
    paths = ["/", "/api", "/api/v1/x", "/apiary", "/admin/x", "/api/../admin", "/x"]
    methods = ["GET", "get", "POST", "PUT", "DELETE", "PATCH", "BREW"]
    for memo in (1024, 0):
        compiled = compile_policy(stored, cache_size=memo)
        for host in hosts:
            for path in paths:
                for method in methods:
                    url = f"https://{host}{path}"
                    verdict = evaluate(compiled, method, url)
                    expected = reference(stored, method, url)
                    assert (verdict.action, verdict.source, verdict.rule_index) == expected, (method, url)


# ---- what mutation testing found unguarded (docs/testing.md) ----------------------------------


def test_report_mode_is_compiled_from_the_stored_mode() -> None:
    assert compile_policy(policy(rule())).report_only is False  # type: ignore[union-attr]
    reported = compile_policy({**policy(rule()), "mode": "report"})
    assert reported is not None and reported.report_only is True


@pytest.mark.parametrize(
    ("url", "valid"),
    [
        ("http://h.example:65535/", True),
        ("http://h.example:65536/", False),
        ("http://h.example:00080/", True),  # five digits
        ("http://h.example:000080/", False),  # six
        ("http://:80/", False),  # a port without a host
        ("HTTPS://H.EXAMPLE/x", True),  # schemes and hosts compare case-insensitively
        ("http://h.example/a\x7fb", False),  # an ASCII control character
        ("http://h.example/caf\u00e9", True),  # printable non-ASCII is percent-encoded, not refused
    ],
)
def test_url_boundaries(url: str, valid: bool) -> None:
    assert (parse_url(url) is not None) is valid


def test_the_url_length_limit_is_inclusive() -> None:
    base = "http://h.example/"
    assert parse_url(base + "a" * (MAX_URL_LENGTH - len(base))) is not None
    assert parse_url(base + "a" * (MAX_URL_LENGTH - len(base) + 1)) is None


def test_the_host_length_limit_is_inclusive() -> None:
    labels = ["a" * 63, "b" * 63, "c" * 63, "d" * 58, "ex"]  # 253 characters with the dots
    host = ".".join(labels)
    assert len(host) == MAX_HOST_LENGTH
    assert parse_url(f"http://{host}/") is not None
    assert parse_url(f"http://x{host}/") is None


@pytest.mark.parametrize("host", ["a.b.c.example.com", "x.y.example.com", "q.example.com"])
def test_a_wildcard_matches_every_depth_of_subdomain(host: str) -> None:
    compiled = compile_policy(policy(rule("deny", host="*.example.com"), default="allow"))
    assert evaluate(compiled, "GET", f"http://{host}/").action == "deny"
    deeper = compile_policy(policy(rule("deny", host="*.c.example.com"), default="allow"))
    expected = "deny" if host.endswith(".c.example.com") else "allow"
    assert evaluate(deeper, "GET", f"http://{host}/").action == expected


def test_five_dotted_numbers_are_not_an_address() -> None:
    assert canonical_ipv4("1.2.3.4.5") is None
    assert canonical_ipv4("1.2.3.4") == "1.2.3.4"


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("255.255.255.255", "255.255.255.255"),
        ("255.1.1.1", "255.1.1.1"),
        ("256.1.1.1", None),
        ("1.256.1.1", None),
        ("1.1.256.1", None),
        ("1.1.1.256", None),
        ("1.1.65535", "1.1.255.255"),  # the last part fills the remaining bytes
        ("1.1.65536", None),
        ("1.16777215", "1.255.255.255"),
        ("1.16777216", None),
        ("4294967295", "255.255.255.255"),
        ("4294967296", None),
        ("0x.1.2.3", "0.1.2.3"),  # a bare 0x is zero
    ],
)
def test_ipv4_parts_are_range_checked(host: str, address: str | None) -> None:
    assert canonical_ipv4(host) == address


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("http://h.example?x=1", ("h.example", "/")),  # a query right after the authority
        ("http://h.example#f", ("h.example", "/")),
        ("http://h.example/a?b#c", ("h.example", "/a")),
        ("http://h.example/a#c?d", ("h.example", "/a")),  # a '?' inside the fragment is not a query
        ("http://u:pw@h.example/", ("h.example", "/")),
        ("http://a@b@h.example/", ("h.example", "/")),  # the last '@' ends the userinfo
        ("HtTp://h.example/", ("h.example", "/")),
        ("http://h.example\\@evil.example/", None),  # a backslash in the authority: parsers disagree
        ("http://evil.example\\.h.example/", None),
        ("http:/h.example/", None),
        ("http:h.example", None),
        ("ftp://h.example/", None),
    ],
)
def test_the_authority_and_path_are_split_as_a_browser_would(url: str, parsed: Any) -> None:
    assert parse_url(url) == parsed


def test_a_host_meets_every_wildcard_it_falls_under_in_rule_order() -> None:
    stored = policy(
        rule("deny", host="*.example.com"), rule("allow", host="*.c.example.com"), default="allow"
    )
    assert decide(stored, "http://a.c.example.com/") == ("deny", "rule", 0)
    assert decide(stored, "http://a.b.example.com/") == ("deny", "rule", 0)
    reordered = policy(
        rule("allow", host="*.c.example.com"), rule("deny", host="*.example.com"), default="deny"
    )
    assert decide(reordered, "http://x.a.c.example.com/") == ("allow", "rule", 0)
    assert decide(reordered, "http://x.a.b.example.com/") == ("deny", "rule", 1)


@pytest.mark.parametrize(
    ("path", "normalised"),
    [
        ("/a%G1", None),
        ("/a%1G", None),
        ("/a%4", None),
        ("/a%41%42", "/aAB"),
        ("/%7e", "/~"),
        ("/a%2f%2F", "/a%2F%2F"),
    ],
)
def test_percent_escapes_are_checked_and_decoded_one_by_one(path: str, normalised: str | None) -> None:
    assert normalise_path(path) == normalised


def test_numeric_looking_last_labels() -> None:
    assert parse_url("http://a.0xg/") == ("a.0xg", "/")  # not hex after 0x: a name
    assert parse_url("http://a.0x1f/") is None  # a number as the last label: not a name
    assert canonical_ipv4("1.2.3.4.0") is None


def test_a_rule_prefix_keeps_a_bad_escape_as_a_literal_percent() -> None:
    """Rule prefixes are normalised leniently: a bad escape is the text `%25`, and the rest is kept."""
    assert normalise_path("/a%zzb%41", lenient=True) == "/a%25zzbA"
    assert normalise_path("/a%zzb%41") is None


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("http://h.example/a\u00a0b", ("h.example", "/a%C2%A0b")),  # non-ASCII, not printable: encoded
        ("http://h.example/a\u2028b", ("h.example", "/a%E2%80%A8b")),
        ("HTTP://h.example:8080/x", ("h.example", "/x")),  # the scheme's colon, not the port's
        ("http://h.example/a?b?c", ("h.example", "/a")),  # the first '?' starts the query
        ("http://h.example/a#b#c", ("h.example", "/a")),  # the first '#' starts the fragment
        ("http://h.example/a\\b", ("h.example", "/a%5Cb")),  # a backslash in the path is encoded
        ("http://h.example/?q=a\\b", ("h.example", "/")),  # and in the query ignored
        ("http://h.example/a b", ("h.example", "/a%20b")),
        ("http://h.example/a\"b", ("h.example", "/a%22b")),
        ("http://h.example/%7e", ("h.example", "/~")),
        ("http://h.example/caf\u00e9", ("h.example", "/caf%C3%A9")),
    ],
)
def test_paths_outside_the_fast_path_are_normalised(url: str, parsed: Any) -> None:
    assert parse_url(url) == parsed
