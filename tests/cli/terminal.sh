#!/usr/bin/env bash
# `run -it`: an interactive python3 on a terminal in the guest, typed into through a tmux pane as a
# person would. It takes input, sees the window's size at start and after a resize, a Ctrl-C
# interrupts a busy loop with KeyboardInterrupt and the REPL goes on, `exit()` ends the run with
# status 0 and no sandbox is left. Then `-i` without `-t` forwards a pipe line by line, and `-t`
# on a backend without terminals is refused before any sandbox exists.
#   terminal.sh MAF_SANDBOX
set -u
bin=$1
failures=0
if ! command -v tmux >/dev/null; then
    echo "FAIL: tmux is missing (scripts/bootstrap installs it)"
    exit 1
fi
work=$(mktemp -d /tmp/maf-cli-tty-XXXXXX)
export MAF_SANDBOX_STATE_DIR=$work/state
# A tmux server of this test's own, so no one else's sessions are touched.
tmux_() { tmux -L "maf-tty-$$" -f /dev/null "$@"; }
sandbox_ids() {
    "$bin" ls --json 2>/dev/null | python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin)]' 2>/dev/null
}
cleanup() {
    tmux_ kill-server 2>/dev/null
    for id in $(sandbox_ids); do "$bin" rm "$id" >/dev/null 2>&1; done
    rm -rf "$work"
}
trap cleanup EXIT
out=$work/out err=$work/err
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# The pane's whole text, history included, without the line wraps tmux adds.
pane() { tmux_ capture-pane -p -J -S - -t tty; }
# wait_for WHAT PATTERN [SECONDS]: polls the pane until a line matches PATTERN (an extended regex).
wait_for() {
    local what=$1 pattern=$2 deadline=$((SECONDS + ${3:-60}))
    until pane | grep -Eq -- "$pattern"; do
        if ((SECONDS > deadline)); then
            fail "$what: the pane never showed /$pattern/; it shows:"
            pane | tail -15 | sed 's/^/  | /'
            return 1
        fi
        sleep 0.05
    done
    echo "ok: $what"
}
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# How many lines of the pane match PATTERN.
count() { pane | grep -Ec -- "$1"; }

# Processes in a sandbox's cgroups: none once it is disposed.
processes_of() { grep -ls "maf-sbx-$1" /proc/[0-9]*/cgroup 2>/dev/null | wc -l; }
# The CPU time (user, in clock ticks) of the sandbox's python3, 0 while it cannot be found.
python_ticks() {
    local file
    for file in $(grep -ls "maf-sbx-$1" /proc/[0-9]*/cgroup 2>/dev/null); do
        local dir=${file%/cgroup}
        if [[ "$(cat "$dir/comm" 2>/dev/null)" == python3* ]]; then
            awk '{print $14}' "$dir/stat" 2>/dev/null
            return
        fi
    done
    echo 0
}

status_file=$work/status
tmux_ new-session -d -s tty -x 100 -y 30 \
    "'$bin' run -it --floor container --timeout 300 -- python3; echo \$? >'$status_file'"
tmux_ set-option -g status off >/dev/null

if wait_for "python3's prompt appears on the guest's terminal" '^>>> ' 90; then
    id=$(sandbox_ids)
    [[ -n "$id" ]] || fail "ls does not show the run's sandbox"

    tmux_ send-keys -t tty 'import os; print("size", os.get_terminal_size())' Enter
    wait_for "the terminal has the window's size at start" 'size os.terminal_size\(columns=100, lines=30\)'
    tmux_ resize-window -t tty -x 90 -y 25
    tmux_ send-keys -t tty 'print("resized", os.get_terminal_size())' Enter
    wait_for "a resize reaches the guest's terminal (SIGWINCH)" 'resized os.terminal_size\(columns=90, lines=25\)'

    tmux_ send-keys -t tty 'print(6*7)' Enter
    wait_for "input reaches the REPL: print(6*7) prints 42" '^42$'

    # A busy loop, seen running (its CPU time grows) before the Ctrl-C.
    tmux_ send-keys -t tty 'while True: pass' Enter Enter
    start=$(python_ticks "$id")
    deadline=$((SECONDS + 60))
    until (($(python_ticks "$id") > start + 30)); do
        if ((SECONDS > deadline)); then
            fail "the busy loop never ran"
            break
        fi
        sleep 0.05
    done
    prompts=$(count '^>>> ')
    tmux_ send-keys -t tty C-c
    wait_for "Ctrl-C interrupts the loop with KeyboardInterrupt" '^KeyboardInterrupt'
    tmux_ send-keys -t tty 'print("after", 6*7+1)' Enter
    wait_for "the REPL goes on after the interrupt" '^after 43$'
    (($(count '^>>> ') > prompts)) || fail "no new prompt after the interrupt"

    tmux_ send-keys -t tty 'exit()' Enter
    deadline=$((SECONDS + 60))
    until [[ -s "$status_file" ]]; do
        if ((SECONDS > deadline)); then
            fail "run -it did not end after exit()"
            break
        fi
        sleep 0.05
    done
    status=$(cat "$status_file" 2>/dev/null)
    [[ "$status" == 0 ]] && echo "ok: exit() ends run -it with status 0" ||
        fail "run -it exited '$status' after exit(), wanted 0"
    [[ -z "$(sandbox_ids)" ]] || fail "ls still lists a sandbox after run -it: $(sandbox_ids)"
    [[ -z "$id" || $(processes_of "$id") -eq 0 ]] || fail "processes of sandbox $id are alive"
    [[ -z "$id" || ! -e "$work/state/sandboxes/$id" ]] || fail "the registry still holds sandbox $id"
fi
tmux_ kill-server 2>/dev/null

# -t without a terminal on this side: the guest still gets one, of its own devpts (numbered from
# 0 whatever the host's hold), at the default size, and the program's stdout is that terminal.
expect_run 0 "run -t gives the program a terminal of the sandbox's own devpts" -- bash -c \
    "'$bin' run -t --floor container -- sh -c 'tty; stty size; test -t 1 && echo stdout-is-a-tty' </dev/null"
[[ "$(tr -d '\r' <"$out")" == $'/dev/pts/0\n24 80\nstdout-is-a-tty' ]] && echo "ok: /dev/pts/0, 24x80, stdout on it" ||
    fail "run -t printed '$(head -c 300 "$out")'"

# -i without -t: stdin stays open and is forwarded as it comes (the program answers each line
# before the next is written), and its EOF reaches the program.
expect_run 0 "run -i forwards stdin as it comes and its EOF" -- bash -c "
    exec 3> >(cat >'$work/answers')
    coproc CLI { '$bin' run -i --backend local --floor container -- sh -c 'while read l; do echo got \$l; done; echo eof'; }
    for word in one two; do
        echo \$word >&\${CLI[1]}
        read -t 60 answer <&\${CLI[0]} || exit 1
        echo \"\$answer\" >&3
    done
    eval \"exec \${CLI[1]}>&-\"
    read -t 60 answer <&\${CLI[0]} || exit 1
    echo \"\$answer\" >&3
    wait \$CLI_PID"
[[ "$(cat "$work/answers" 2>/dev/null)" == $'got one\ngot two\neof' ]] &&
    echo "ok: each line was answered before the next was sent" ||
    fail "the answers were '$(cat "$work/answers" 2>/dev/null)'"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
