# Shared by the tests' install-deps.sh scripts (sourced, never run): the checks and the two
# ways test tools are installed, pinned and idempotent. Each installer writes a stamp file once
# its pinned packages are in place, so a second run only checks the stamp.
# Network: PyPI and the npm registry only.

die() {
    echo "scripts/test: $*" >&2
    exit 1
}

# Python >= 3.10 with venv support, for the venvs below.
need_python() {
    command -v python3 >/dev/null ||
        die "python3 is missing; install Python >= 3.10 with venv support (Debian/Ubuntu: apt-get install python3 python3-venv)"
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
        die "python3 is $(python3 -V 2>&1); the test tools need Python >= 3.10"
}

# Node.js >= 20 with npm, for the npm prefixes below.
need_node() {
    command -v node >/dev/null ||
        die "node is missing; install Node.js >= 20 with npm (https://nodejs.org, or apt-get install nodejs npm)"
    command -v npm >/dev/null || die "npm is missing; install it with Node.js (apt-get install npm)"
    node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' ||
        die "node is $(node --version); the test tools need Node.js >= 20"
}

# pip_install VENV STAMP WHAT PACKAGE...: PACKAGEs (pinned) into the venv VENV unless STAMP exists.
pip_install() {
    local venv=$1 stamp=$2 what=$3
    shift 3
    [[ -f $stamp ]] && return 0
    echo "scripts/test: installing $what ($*) into $venv" >&2
    python3 -m venv "$venv" ||
        die "cannot create a venv with $(command -v python3); install the venv module (Debian/Ubuntu: apt-get install python3-venv)"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" ||
        die "pip could not install $* (is PyPI reachable?)"
    touch "$stamp"
}

# npm_install DIR STAMP WHAT PACKAGE...: PACKAGEs (pinned) into the npm prefix DIR unless STAMP exists.
npm_install() {
    local dir=$1 stamp=$2 what=$3
    shift 3
    [[ -f $stamp ]] && return 0
    echo "scripts/test: installing $what ($*) into $dir" >&2
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$@" ||
        die "npm could not install $* (is the npm registry reachable?)"
    touch "$stamp"
}
