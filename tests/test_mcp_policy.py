"""The access policy's MCP rules (svc/runtime/mcp_policy.py): first match wins, the default,
arguments by path and glob, listing apart from calling, report mode, and the policy version."""

from __future__ import annotations

from typing import Any

from svc.runtime.mcp_policy import compile_mcp_policy, evaluate, listable, policy_version, read_back_mcp


def policy(
    *rules: dict[str, Any], default: str = "allow", mcp_default: str | None = None, **extra: Any
) -> dict[str, Any]:
    mcp: dict[str, Any] = {"rules": list(rules)}
    if mcp_default:
        mcp["defaultAction"] = mcp_default
    return {"accessPolicyVersion": "1", "defaultAction": default, "mcp": mcp, **extra}


def verdict(
    p: dict[str, Any] | None, server: str, tool: str, arguments: dict[str, Any] | None = None
) -> tuple[str, str | None, int | None]:
    found = evaluate(compile_mcp_policy(p), server, tool, arguments or {})
    return found.action, found.source, found.rule_index


GITHUB = policy(
    {"match": {"server": "github", "tool": "delete_*"}, "action": "deny", "reason": "no deletes"},
    {
        "match": {
            "server": "github",
            "tool": "create_issue",
            "arguments": [{"path": "$.repo", "pattern": "acme/*"}],
        },
        "action": "allow",
    },
    {"match": {"server": "github", "tool": "create_issue"}, "action": "require_approval"},
    {"match": {"server": "git*", "tool": "get_*"}, "action": "allow"},
    {"match": {"tool": "search"}, "action": "judge"},
    mcp_default="deny",
)


def test_the_first_matching_rule_decides() -> None:
    assert verdict(GITHUB, "github", "delete_repo") == ("deny", "rule", 0)
    assert verdict(GITHUB, "github", "create_issue", {"repo": "acme/web"}) == ("allow", "rule", 1)
    assert verdict(GITHUB, "github", "create_issue", {"repo": "evil/web"}) == ("approval", "rule", 2)
    assert verdict(GITHUB, "github", "create_issue", {}) == ("approval", "rule", 2)  # missing: no match
    assert verdict(GITHUB, "gitlab", "get_file") == ("allow", "rule", 3)
    assert verdict(GITHUB, "docs", "search") == ("judge", "rule", 4)
    assert verdict(GITHUB, "docs", "write") == ("deny", "default", None)


def test_arguments_match_by_path_as_text_and_globs_are_whole_and_case_sensitive() -> None:
    p = policy(
        {
            "match": {
                "arguments": [
                    {"path": "$.opts.limit", "pattern": "1?"},
                    {"path": "$.ids[0]", "pattern": "a*"},
                ]
            },
            "action": "allow",
        },
        {"match": {"arguments": [{"path": "flag", "pattern": "true"}]}, "action": "allow"},
        mcp_default="deny",
    )
    assert verdict(p, "s", "t", {"opts": {"limit": 12}, "ids": ["abc"]})[0] == "allow"
    assert verdict(p, "s", "t", {"opts": {"limit": 120}, "ids": ["abc"]})[0] == "deny"
    assert verdict(p, "s", "t", {"opts": {"limit": 12}, "ids": ["Abc"]})[0] == "deny"
    assert verdict(p, "s", "t", {"flag": True})[0] == "allow"
    assert verdict(p, "s", "t", {"flag": "true "})[0] == "deny"


def test_the_default_is_the_mcp_default_else_the_policys() -> None:
    assert verdict(policy(default="deny"), "s", "t")[0] == "deny"
    assert verdict(policy(default="deny", mcp_default="allow"), "s", "t")[0] == "allow"
    assert verdict({"accessPolicyVersion": "1"}, "s", "t") == ("allow", "default", None)
    assert verdict(None, "s", "t") == ("passthrough", None, None)


def test_listing_is_checked_apart_from_calling() -> None:
    compiled = compile_mcp_policy(GITHUB)
    assert not listable(compiled, "github", "delete_repo")  # never callable: not offered
    assert listable(compiled, "github", "create_issue")  # some calls may go
    assert listable(compiled, "docs", "search")
    assert not listable(compiled, "docs", "write")  # the default denies it
    conditional = compile_mcp_policy(
        policy(
            {"match": {"tool": "t", "arguments": [{"path": "a", "pattern": "x"}]}, "action": "deny"},
            mcp_default="deny",
        )
    )
    assert not listable(conditional, "s", "t")
    reporting = compile_mcp_policy({**GITHUB, "mode": "report"})
    assert listable(reporting, "github", "delete_repo") and reporting.report_only


def test_the_policy_version_changes_with_any_change() -> None:
    first = compile_mcp_policy(GITHUB).version
    assert first == policy_version(GITHUB) and len(first) == 16
    assert compile_mcp_policy({**GITHUB, "defaultAction": "deny"}).version != first


def test_read_back() -> None:
    back = read_back_mcp(GITHUB)
    assert back["defaultAction"] == "BLOCK"
    assert [r["action"] for r in back["rules"]] == ["BLOCK", "ALLOW", "APPROVAL", "ALLOW", "JUDGE"]
    assert read_back_mcp(None) is None


def test_an_install_actor_without_mcp_does_not_load_the_sdk() -> None:
    """The SDK (and its HTTP client and web framework) load only when a team uses MCP servers."""
    import subprocess
    import sys

    code = (
        "import sys, svc.wiring, svc.runtime, svc.mcp; "
        "print(sorted(m for m in ('mcp', 'httpx2', 'starlette', 'mcp_types') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
