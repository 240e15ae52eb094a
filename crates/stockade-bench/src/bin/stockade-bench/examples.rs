//! The examples at the end of each measurement's `--help`, kept verbatim (clap re-wraps doc
//! comments into paragraphs). They are written as `stockade bench …`, the way people run it.

pub const BENCH: &str = "\
Examples:
  stockade bench growth --quick
  stockade bench edges --out bench-out
  stockade bench plot --out bench-out";

pub const BENCH_GROWTH: &str = "\
Examples:
  stockade bench growth --variants pipe,file,node
  stockade bench growth --variants pipe --concurrency 64,128
  stockade bench growth --variants pipe --concurrency 4 --bytes 20MiB,256MiB,1GiB
  stockade bench growth --quick --out /tmp/bench";

pub const BENCH_EDGES: &str = "\
Examples:
  stockade bench edges
  stockade bench edges --quick --out /tmp/bench";

pub const BENCH_DRAIN: &str = "\
Examples:
  stockade bench drain
  stockade bench drain --bytes 256MiB --rounds 5";

pub const BENCH_READ: &str = "\
Examples:
  stockade bench read
  stockade bench read --quick --base64
  stockade bench read --bytes 256MiB --rounds 5";

pub const BENCH_SPAWN: &str = "\
Examples:
  stockade bench spawn
  stockade bench spawn --rounds 1000
  stockade bench spawn --home /tmp       # the home in a busy directory: more read rules";

pub const BENCH_MEMORY: &str = "\
Examples:
  stockade bench memory
  stockade bench memory --cases idle,live --live-sessions 1000
  stockade bench memory --quick";

pub const BENCH_GREP: &str = "\
Examples:
  stockade bench grep
  stockade bench grep --quick";

pub const BENCH_LIST: &str = "\
Examples:
  stockade bench list
  stockade bench list --sessions 500";

pub const BENCH_SCALE: &str = "\
Examples:
  stockade bench scale
  stockade bench scale --sessions 200 --no-cgroup";

pub const BENCH_PLOT: &str = "\
Examples:
  stockade bench plot
  stockade bench plot --out /tmp/bench --memory-line 1GiB";
