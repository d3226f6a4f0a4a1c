"""Access-policy evaluation benchmark: microseconds per `svc.policy.evaluate` call with 100 rules.

Compiles 100-rule policies and evaluates one request 100,000 times per scenario, in
batches of 1,000, and prints p50/p99/min microseconds per evaluation over the batches.
Scenarios: no rule matches (the worst case) with every rule a candidate for the host
(same host, only the path prefix fails), with rules on other hosts, and with a mix of
exact, wildcard and host-less rules; and a match at rule 50. Compiling precomputes the
rules each (method, host class) meets; evaluation then parses the URL, finds the list and
tests path prefixes. Each scenario runs with the (method, host:port) memo on (the steady
state of one agent) and off (at a tenth of the iterations: the host is parsed and
classified on every call, as for a stream of new hosts or ports). Compile time is
printed too (p50 of 200 compilations, including the pydantic validation).

Target: p50 < 20 µs per evaluation.

    .venv/bin/python bench/policy.py [--iterations 100000] [--batch 1000] [--rules 100]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Any

from svc.runtime.policy import compile_policy, evaluate

TARGET_US = 20.0


@dataclass
class Scenario:
    """One request against one policy, and the rule index that must decide it (None: default)."""

    name: str
    policy: dict[str, Any]
    method: str
    url: str
    expected_rule: int | None


@dataclass
class Result:
    """Microseconds per evaluation of each batch of one scenario."""

    name: str
    memo: str
    evaluations: int
    batch_us: list[float]

    def percentile(self, q: float) -> float:
        ordered = sorted(self.batch_us)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def policy(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """A stored policy with these rules and default deny."""
    return {"accessPolicyVersion": "1", "defaultAction": "deny", "rules": rules}


def same_host_rules(count: int) -> list[dict[str, Any]]:
    """`count` rules on api.example.com, each with methods and its own path prefix."""
    return [
        {
            "match": {
                "host": "api.example.com",
                "methods": ["GET", "POST"],
                "pathPrefix": f"/v1/resource{i}/",
            },
            "action": "allow" if i % 3 else "require_approval",
            "reason": f"rule {i}",
        }
        for i in range(count)
    ]


def mixed_rules(count: int) -> list[dict[str, Any]]:
    """`count` rules mixing exact hosts, wildcards, host-less path rules and method lists."""
    rules: list[dict[str, Any]] = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            match: dict[str, Any] = {"host": f"service{i}.example.com"}
        elif kind == 1:
            match = {"host": f"*.tenant{i}.example.net", "methods": ["GET"]}
        elif kind == 2:
            match = {"pathPrefix": f"/internal/area{i}/"}
        else:
            match = {"host": "api.example.com", "methods": ["DELETE"], "pathPrefix": f"/v2/items{i}"}
        rules.append({"match": match, "action": "deny" if i % 2 else "allow"})
    return rules


def scenarios(count: int) -> list[Scenario]:
    """The benchmarked requests; the matching rule sits in the middle of the policy."""
    middle = count // 2
    other_hosts = [
        {"match": {"host": f"h{i}.example.org", "methods": ["GET"]}, "action": "allow"} for i in range(count)
    ]
    return [
        Scenario(
            "no match, all rules on the host",
            policy(same_host_rules(count)),
            "GET",
            "https://api.example.com/v2/other/thing?page=2",
            None,
        ),
        Scenario(
            "no match, rules on other hosts",
            policy(other_hosts),
            "GET",
            "https://api.example.com/v1/items?page=2",
            None,
        ),
        Scenario(
            "no match, mixed rules",
            policy(mixed_rules(count)),
            "GET",
            "https://api.example.com/v1/items?page=2",
            None,
        ),
        Scenario(
            f"match at rule {middle}, same host",
            policy(same_host_rules(count)),
            "POST",
            f"https://api.example.com/v1/resource{middle}/42?x=1",
            middle,
        ),
        Scenario(
            f"match at rule {middle}, other hosts",
            policy(other_hosts),
            "GET",
            f"https://h{middle}.example.org/",
            middle,
        ),
    ]


def run(scenario: Scenario, memo: str, evaluations: int, batch: int) -> Result:
    """Evaluate the scenario's request `evaluations` times; microseconds per call of each batch."""
    compiled = compile_policy(scenario.policy, cache_size=1024 if memo == "on" else 0)
    assert compiled is not None
    verdict = evaluate(compiled, scenario.method, scenario.url)
    assert verdict.rule_index == scenario.expected_rule, (scenario.name, verdict)
    method, url = scenario.method, scenario.url
    batches: list[float] = []
    for _ in range(max(1, evaluations // batch)):
        started = time.perf_counter()
        for _ in range(batch):
            evaluate(compiled, method, url)
        batches.append((time.perf_counter() - started) / batch * 1e6)
    return Result(scenario.name, memo, len(batches) * batch, batches)


def compile_ms(scenario: Scenario, times: int = 200) -> float:
    """Median milliseconds to compile the scenario's policy."""
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        compile_policy(scenario.policy)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main(args: argparse.Namespace) -> None:
    results, compiles = [], []
    for scenario in scenarios(args.rules):
        results.append(run(scenario, "on", args.iterations, args.batch))
        results.append(run(scenario, "off", args.iterations // 10, args.batch))
        compiles.append((scenario.name, compile_ms(scenario)))
    print_table(results, compiles, args)


def print_table(results: list[Result], compiles: list[tuple[str, float]], args: argparse.Namespace) -> None:
    print(f"\n{args.rules}-rule policies, batches of {args.batch}; µs per evaluation over the batches\n")
    header = (
        f"{'scenario':<36} {'memo':<5} {'evals':>8} {'p50 µs':>8} {'p99 µs':>8} {'min µs':>8} {'mean µs':>8}"
    )
    print(header)
    print("-" * len(header))
    for result in results:
        print(
            f"{result.name:<36} {result.memo:<5} {result.evaluations:>8} {result.percentile(0.5):>8.2f} "
            f"{result.percentile(0.99):>8.2f} {min(result.batch_us):>8.2f} "
            f"{statistics.mean(result.batch_us):>8.2f}"
        )
    print(f"\n{'policy of scenario':<36} {'compile ms (p50)':>17}")
    for name, ms in compiles:
        print(f"{name:<36} {ms:>17.3f}")
    worst = max(result.percentile(0.5) for result in results)
    verdict = "met" if worst < TARGET_US else "NOT met"
    print(f"\ntarget: p50 < {TARGET_US:.0f} µs per evaluation; slowest p50 {worst:.2f} µs ({verdict})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rules", type=int, default=100)
    main(parser.parse_args())
