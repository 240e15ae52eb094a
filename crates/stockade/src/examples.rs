//! The examples at the end of every subcommand's `--help`, kept verbatim (clap re-wraps doc
//! comments into paragraphs, so examples written there ran together on one line). One constant
//! per subcommand; `cli.rs` and the subcommands' own argument types attach them with
//! `after_help`. A test checks that every subcommand has some.

pub const RUN: &str = "\
Examples:
  stockade run 'cargo build'                   # streams live on a terminal, then the summary
  stockade run --direction head -- cargo build # keep the first lines (the first error)
  stockade run --timeout-ms 5000 --json 'make test'
  stockade run --bg --yield-ms 1000 'npm run dev'   # then: stockade logs -f sh-N
  id=$(stockade run --bg -q make); stockade wait \"$id\"   # -q: the id alone
  stockade run --no-pty 'python3 app.py'       # no terminal for the command, even on one";

pub const SEND: &str = "\
Examples:
  stockade run --pty --bg 'python3 -i'
  stockade send sh-3 'print(6*7)\\n'
  stockade send sh-3 '\\x03'                     # Ctrl-C
  stockade send --close-stdin sh-4 'last line\\n'
  stockade send --idempotency-key fix-1 sh-3 'y\\n'   # a retry with the key types nothing twice";

pub const RESIZE: &str = "\
Examples:
  stockade resize sh-3 50 200          # rows, columns
  stockade resize --json sh-3 24 80";

pub const ATTACH: &str = "\
Examples:
  stockade run --pty --bg bash
  stockade attach sh-3            # Ctrl-] detaches; the session keeps running";

pub const PS: &str = "\
Examples:
  stockade ps                     # running sessions and the 20 newest finished ones
  stockade ps -a                  # every session the daemon knows
  stockade ps --state running --source schedule:tests
  stockade kill --all              # every running session, ended together";

pub const LOGS: &str = "\
Examples:
  stockade logs -f sh-3           # follow; ends with [sh-3 exited 0 after 4.2 s] and its status
  stockade logs -n 50 sh-3        # the last 50 lines
  stockade logs --raw sh-3 > build.log";

pub const WAIT: &str = "\
Examples:
  stockade wait sh-3 && echo passed
  stockade wait --timeout 10m sh-3 sh-4
  id=$(stockade run --bg -q make); stockade wait \"$id\"";

pub const KILL: &str = "\
Examples:
  stockade kill sh-3
  stockade kill -s INT --grace-ms 500 sh-3 sh-4
  stockade kill --all              # every running session, ended together";

pub const RESTART: &str = "\
Examples:
  stockade restart sh-3           # same command, directory, environment and options; new id
  stockade restart --kill sh-3    # end the running one first
  id=$(stockade restart -q sh-3); stockade wait \"$id\"
  stockade restart --kill --idempotency-key r-1 sh-3   # a retry with the key starts no second copy";

pub const FORGET: &str = "\
Examples:
  stockade forget sh-3
  stockade forget sh-3 sh-4 sh-5";

pub const CLEANUP: &str = "\
Examples:
  stockade cleanup                # forget every finished session
  stockade cleanup --all          # running ones too";

pub const STATS: &str = "\
Examples:
  stockade stats
  stockade stats --json";

pub const READ: &str = "\
Examples:
  stockade read sh-3
  stockade read sh-3 --after 50000 --max-bytes 64KiB
  stockade read --mode head --max-lines 40 sh-3
  stockade read ~/.local/state/stockade/spool/run-1/sh-3/output.log --raw";

pub const GREP: &str = "\
Examples:
  stockade grep sh-3 'error\\[E[0-9]+\\]'
  stockade grep -C 3 -i sh-3 panicked";

pub const DOCTOR: &str = "\
Examples:
  stockade doctor
  stockade doctor --json";

pub const DAEMON: &str = "\
Examples:
  stockade daemon start
  stockade daemon status
  stockade daemon stop
  stockade daemon run --ws 127.0.0.1:7433 --token-file ~/.config/stockade/token
  stockade daemon run --ws 0.0.0.0:7433 --token-file /etc/stockade/token \\
      --tls-cert /etc/stockade/tls.crt --tls-key /etc/stockade/tls.key";

pub const DAEMON_RUN: &str = "\
Examples:
  stockade daemon run
  stockade daemon run --retention 2d --metrics 127.0.0.1:9433
  stockade daemon run --ws 127.0.0.1:7433 --token-file ~/.config/stockade/token
  stockade daemon run --ws 0.0.0.0:7433 --token-file /etc/stockade/token \\
      --tls-cert /etc/stockade/tls.crt --tls-key /etc/stockade/tls.key";

pub const DAEMON_START: &str = "\
Examples:
  stockade daemon start
  stockade --home /tmp/st daemon start --json";

pub const DAEMON_STOP: &str = "\
Examples:
  stockade daemon stop            # Daemon stopped (pid 7); terminated 2 running sessions: sh-3, sh-4
  stockade --home /tmp/st daemon stop";

pub const DAEMON_STATUS: &str = "\
Examples:
  stockade daemon status
  stockade daemon status --json";

pub const BENCH: &str = "\
Examples:
  stockade bench growth --quick
  stockade bench edges --out bench-out
  stockade bench plot --out bench-out";

pub const MCP: &str = "\
Examples:
  claude mcp add stockade -- stockade mcp
  stockade mcp --structured          # for a program that reads the JSON results
  stockade mcp --http 127.0.0.1:8765
  stockade mcp --http 0.0.0.0:8765 --token-file ~/.config/stockade/token
  stockade mcp --http 127.0.0.1:8765 --allow-origin http://localhost:6274
  stockade --remote wss://sandbox:7433 mcp --token-file ~/.config/stockade/token";

pub const SCHEDULE: &str = "\
Examples:
  stockade schedule add tests --every 10m -- cargo test
  stockade schedule list
  stockade schedule run tests     # fire now (skipped if the last run is still active)
  stockade schedule runs tests";

pub const SCHEDULE_ADD: &str = "\
Examples:
  stockade schedule add tests --every 10m -- cargo test
  stockade schedule add backup --cron '0 3 * * *' --timeout-ms 3600000 'rsync -a src/ bak/'
  stockade schedule add lint --every '1h 30m' --catch-up skip --keep-runs 5 'make lint'";

pub const SCHEDULE_LIST: &str = "\
Examples:
  stockade schedule list
  stockade schedule list --json";

pub const SCHEDULE_RM: &str = "\
Examples:
  stockade schedule rm tests";

pub const SCHEDULE_PAUSE: &str = "\
Examples:
  stockade schedule pause tests
  stockade schedule resume tests";

pub const SCHEDULE_RESUME: &str = "\
Examples:
  stockade schedule resume tests
  stockade schedule list";

pub const SCHEDULE_RUN: &str = "\
Examples:
  stockade schedule run tests
  stockade schedule run tests --json";

pub const SCHEDULE_RUNS: &str = "\
Examples:
  stockade schedule runs tests
  stockade schedule runs tests --limit 5 --json";

pub const COMPLETIONS: &str = "\
Examples:
  stockade completions bash > ~/.local/share/bash-completion/completions/stockade
  stockade completions zsh > ~/.zfunc/_stockade
  stockade completions fish > ~/.config/fish/completions/stockade.fish";

pub const MAN: &str = "\
Examples:
  stockade man | man -l -
  stockade man --dir ~/.local/share/man/man1   # one page per subcommand";
