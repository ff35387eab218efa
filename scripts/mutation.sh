#!/usr/bin/env bash
# Mutation testing (issue #13): mutmut 3 over one of two scopes, each with its own scratch directory and
# results:
#   core    (default) storage/ and the commit path in activities/ and capture/ (projection, intake
#           bookkeeping, the reconcile activity, replay adoption, the semantic commit): [tool.mutmut] and
#           tests/mutation_selection.txt, in .mutation/
#   recall  recall/: [tool.tempomem.mutation-recall] and tests/mutation_selection_recall.txt, in
#           .mutation-recall/
# TEMPOMEM_MUTATION_SCOPE=recall picks the second.
#
#   bash scripts/mutation.sh            # run (or resume) and print the kill rate
#   bash scripts/mutation.sh run NAME…  # run these mutants again (e.g. survivors, after new tests)
#   bash scripts/mutation.sh report     # the kill rate of the last run, per file
#   bash scripts/mutation.sh results    # mutmut's own list of survivors
#   bash scripts/mutation.sh show NAME  # the diff of one mutant
#   bash scripts/mutation.sh sample PERCENT [SEED]  # check a random PERCENT% of each file's unchecked
#                                       # mutants (drawn once, then resumed); the report estimates the rest
#
# mutmut names a mutant by the module path of its file, so it needs the package's import names on disk.
# The repository maps storage/, recall/, capture/, activities/ and workflows/ under tempomem at install time
# (pyproject package-dir); this script assembles that tree as src/tempomem/ in a scratch directory
# (.mutation/, or $TEMPOMEM_MUTATION_DIR) with a copy of tests/, and runs mutmut there. Each mutant runs
# the Temporal-free tests that reach the mutated function (tests/mutation_selection.txt); the run is not
# part of CI (about an hour on 2 cores). Not a place to edit: the scratch tree is rebuilt from the
# repository when the sources differ.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
scope="${TEMPOMEM_MUTATION_SCOPE:-core}"
case "$scope" in
  core) selection="$root/tests/mutation_selection.txt"; work="${TEMPOMEM_MUTATION_DIR:-$root/.mutation}" ;;
  recall)
    selection="$root/tests/mutation_selection_recall.txt"
    work="${TEMPOMEM_MUTATION_DIR:-$root/.mutation-recall}"
    ;;
  *) echo "TEMPOMEM_MUTATION_SCOPE must be core or recall, not '$scope'" >&2; exit 2 ;;
esac
py="$root/.venv/bin/python"
if ! "$py" -c "import mutmut" 2>/dev/null; then
  "$py" -m pip install -q -c "$root/constraints.txt" -e "$root[mutation]"
fi

assemble() {
  local stage
  stage="$(mktemp -d)"
  mkdir -p "$stage/src"
  cp -r "$root/tempomem" "$stage/src/tempomem"
  for d in storage recall capture activities workflows; do cp -r "$root/$d" "$stage/src/tempomem/$d"; done
  cp -r "$root/tests" "$stage/tests"
  rm -f "$stage/tests/mutation_equivalent.txt"
  find "$stage" -name __pycache__ -prune -exec rm -rf {} +
  "$py" - "$root/pyproject.toml" "$selection" "$scope" > "$stage/pyproject.toml" <<'EOF'
import sys, tomllib, json
pp = tomllib.load(open(sys.argv[1], "rb"))
tests = [t.strip() for t in open(sys.argv[2]) if t.strip() and not t.startswith("#")]
mm = pp["tool"]["mutmut"]
if sys.argv[3] == "recall":
    mm = {**mm, **pp["tool"]["tempomem"]["mutation-recall"]}
pt = pp["tool"]["pytest"]["ini_options"]
def arr(xs):
    return "[" + ", ".join(json.dumps(x) for x in xs) + "]"
print("[tool.mutmut]")
print('source_paths = ["src"]')
print("only_mutate = " + arr(mm["only_mutate"]))
print("do_not_mutate_patterns = " + arr(mm.get("do_not_mutate_patterns", [])))
if "timeout_multiplier" in mm:
    print(f"timeout_multiplier = {mm['timeout_multiplier']}")
print("pytest_add_cli_args_test_selection = " + arr(tests))
print("pytest_add_cli_args = " + arr(["-p", "no:cacheprovider", "-m", "not slow and not crash",
                                     "--hypothesis-profile=mutation"]))
# Fork each mutant from a server that has imported the tests but never run them: a process forked after
# LanceDB started its runtime (the stats run) can deadlock in the child, and each such mutant then waits
# out its timeout.
print('process_isolation = "forkserver"')
print("[tool.pytest.ini_options]")
for k, v in pt.items():
    print(f"{k} = {arr(v) if isinstance(v, list) else json.dumps(v)}")
EOF
  # Same mutants: bring sources and tests up to date and keep mutmut's results (it regenerates the
  # mutants of changed functions and collects stats for new tests); other mutants start over. Only what
  # decides the set of mutants counts (what is mutated, and how): the test selection, pytest's options
  # and markers change which tests run, like a test added to a selected file (kept results stand until
  # those mutants are run again by name).
  mutant_keys='^(source_paths|only_mutate|do_not_mutate_patterns|process_isolation) '
  if [ -d "$work/mutants" ] && cmp -s <(grep -E "$mutant_keys" "$stage/pyproject.toml") \
    <(grep -E "$mutant_keys" "$work/pyproject.toml"); then
    rm -rf "$work/src" "$work/tests"
    mv "$stage/src" "$stage/tests" "$stage/pyproject.toml" "$work/"
    rm -rf "$stage"
    return
  fi
  rm -rf "$work"
  mkdir -p "$(dirname "$work")"
  mv "$stage" "$work"
}

cd "$root"
case "${1:-run}" in
  run)
    assemble
    cd "$work"
    # Child processes that tests start (the crash helpers, concurrent readers) import the installed,
    # unmutated package: mutmut's trampolines cannot read their configuration from another directory.
    # A mutant on such a path is killed, or not, by what the parent process checks.
    # Extra arguments name mutants to run again (after new tests), e.g. the survivors of the last run.
    "$root/.venv/bin/mutmut" run --max-children "${TEMPOMEM_MUTATION_JOBS:-2}" "${@:2}" || true
    "$py" "$root/scripts/mutation_report.py" "$root" "$work" "$scope"
    ;;
  sample)
    [ -n "${2:-}" ] || { echo "usage: scripts/mutation.sh sample PERCENT [SEED]" >&2; exit 2; }
    assemble
    mapfile -t names < <("$py" "$root/scripts/mutation_sample.py" "$work" "$2" "${3:-13}")
    cd "$work"
    if [ "${#names[@]}" -gt 0 ]; then
      "$root/.venv/bin/mutmut" run --max-children "${TEMPOMEM_MUTATION_JOBS:-2}" "${names[@]}" || true
    fi
    "$py" "$root/scripts/mutation_report.py" "$root" "$work" "$scope"
    ;;
  report)
    "$py" "$root/scripts/mutation_report.py" "$root" "$work" "$scope"
    ;;
  results)
    cd "$work" && "$root/.venv/bin/mutmut" results
    ;;
  show)
    cd "$work" && "$root/.venv/bin/mutmut" show "$2"
    ;;
  *)
    echo "usage: scripts/mutation.sh [run|report|results|show NAME|sample PERCENT [SEED]]" >&2
    exit 2
    ;;
esac
