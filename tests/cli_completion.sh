#!/usr/bin/env bash
# cli_completion: checks cli/cohort.bash-completion.  Sources it, calls its
# function as bash would (COMP_WORDS, COMP_CWORD) for a set of command lines
# and compares COMPREPLY with what each should offer.
#   bash tests/cli_completion.sh      (from the repository's top)
# Prints each mismatch and exits 1 when there is one.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck disable=SC1091 # found at run time, from the script's own place
source "$top/cli/cohort.bash-completion" || exit 1

failed=0
checks=0

# expect WANT WORD...: completing the last WORD (the command line split as
# bash splits it) offers exactly WANT (space-separated, in any order).
expect()
{
    local want=$1 got
    shift
    COMP_WORDS=("$@")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMP_LINE="$*"
    COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    _cohort cohort "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    got=$(printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | LC_ALL=C sort | tr '\n' ' ')
    # shellcheck disable=SC2086 # want is a list of words
    want=$(printf '%s\n' $want | sed '/^$/d' | LC_ALL=C sort | tr '\n' ' ')
    checks=$((checks + 1))
    if [[ $got != "$want" ]]; then
        printf 'FAIL: %s|\n  want: %s\n  got:  %s\n' "$*" "$want" "$got"
        failed=1
    fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src" "$tmp/data"
touch "$tmp/job.yaml" "$tmp/job.json" "$tmp/notes.txt"
cd "$tmp" || exit 1

[[ $(complete -p cohort 2>/dev/null) == "complete -F _cohort cohort" ]] ||
    { echo "FAIL: complete -F _cohort cohort is not registered"; failed=1; }

# commands, and the general options before one
expect "jobs join-token" cohort j
expect "login logout logs" cohort lo
expect "tenant tenants token" cohort t
expect "usage user users" cohort us
expect "jobs join-token" cohort --json j
expect "jobs join-token" cohort -o id,state j
expect "jobs join-token" cohort --url http : //localhost : 8080 j
expect "--json --output --url --help --version" cohort --
expect "" cohort --url ""

# each command's options
expect "--state --name --all --json --output --url --help" cohort jobs --
expect "--all" cohort jobs --a
expect "-f --follow --rank --attempt --tail --json -o --output --url --help" cohort logs 7 -
expect "--csv" cohort usage --by day --c
expect "--csv" cohort invoice --cs
expect "--file --follow" cohort submit --f
expect "--per-node --priority" cohort submit --p
expect "--max-runtime" cohort quote job.yaml --max
expect "--seal" cohort ds push data mnist --se
expect "" cohort ws push data ws --se
expect "--role" cohort user create acme bob --r
expect "--expires" cohort token create --e
expect "--uses --url" cohort join-token --u

# option values
expect "PENDING STARTING RUNNING SUCCEEDED FAILED CANCELLED" cohort jobs --state ""
expect "RUNNING" cohort jobs --state R
expect "SUCCEEDED STARTING" cohort --json jobs --state S
expect "RUNNING" cohort jobs --state = R
expect "day job user worker_spec" cohort usage --by ""
expect "worker_spec" cohort usage --from 2025-01-01 --by w
expect "member viewer tenant_admin platform_admin" cohort user create acme bob --role ""
expect "tenant_admin" cohort user --role t
expect "" cohort submit --name ""
expect "" cohort jobs -o ""

# subverbs
expect "ls push pull rm" cohort ws ""
expect "ls push pull seal rm" cohort ds ""
expect "seal" cohort ds se
expect "drain undrain rm rotate-token" cohort node ""
expect "" cohort node drain ""
expect "create ls revoke" cohort join-token ""
expect "create" cohort join-token --uses 3 c
expect "create" cohort tenant ""
expect "create" cohort user ""
expect "create" cohort token ""
expect "" cohort tenant create ""
expect "jobs join-token" cohort help j

# files and directories (bash-completion's _filedir is not loaded here)
expect "data job.json job.yaml notes.txt src" cohort submit ""
expect "job.json job.yaml" cohort submit job
expect "data job.json job.yaml src" cohort submit -f ""
expect "data job.json job.yaml src" cohort quote --file ""
expect "data src" cohort submit --code ""
expect "src" cohort submit --image pytorch --code s
expect "data src" cohort ws push ""
expect "" cohort ws push src ""
expect "" cohort ws pull ""
expect "data src" cohort ws pull ws ""
expect "data" cohort ds pull mnist d
expect "" cohort ds pull ""
# past the program's name every word is the program's: files, not options
expect "notes.txt" cohort submit --workers 2 train.py n
expect "" cohort submit train.py --ep
expect "--epochs" cohort submit job.yaml --ep

# with bash-completion loaded, its _filedir does the files
# shellcheck disable=SC2317 # called by _cohort
_filedir() { COMPREPLY+=("filedir:${1:-}"); }
expect "filedir:-d" cohort submit --code ""
expect "filedir:@(yaml|yml|json)" cohort submit -f ""
expect "filedir:" cohort submit ""
expect "filedir:-d" cohort ds push ""
unset -f _filedir

if ((failed)); then
    echo "cli_completion: some of $checks checks failed"
    exit 1
fi
echo "cli_completion: $checks checks passed"
