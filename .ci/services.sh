# Throwaway Redis and PostgreSQL servers on loopback for the real-server tests.
#
# Source it (`. .ci/services.sh`): it installs the Debian packages when the servers are missing
# (as root, with apt-get), starts each server on 127.0.0.1 on a non-default port unless one
# already answers there, and exports
#
#   CACHEPILOT_TEST_REDIS_URL     redis://127.0.0.1:16379/0
#   CACHEPILOT_TEST_POSTGRES_URL  postgresql://postgres@127.0.0.1:15432/postgres
#   CACHEPILOT_TEST_REDIS_SERVER  the redis-server binary (tests start private servers with it)
#   CACHEPILOT_TEST_PG_BIN        PostgreSQL's bin directory (initdb, pg_ctl)
#
# Servers it started are stopped when the sourcing shell exits. Nothing here fails the caller:
# when a server cannot be had, its variable stays unset and its tests skip with a message.

_cp_services_dir="${TMPDIR:-/tmp}/cachepilot-ci-services"
_cp_redis_port="${CACHEPILOT_CI_REDIS_PORT:-16379}"
_cp_pg_port="${CACHEPILOT_CI_POSTGRES_PORT:-15432}"
_cp_started_redis=""
_cp_started_pg=""
_cp_apt_updated=""

_cp_log() { echo "services: $*"; }

_cp_as_postgres() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

_cp_apt_install() {
    # Install Debian packages without letting their maintainer scripts start system services.
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
    local policy=/usr/sbin/policy-rc.d added=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && added=1
    fi
    if [ -z "$_cp_apt_updated" ]; then
        apt-get update -qq >/dev/null 2>&1 || true
        _cp_apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
        >"$_cp_services_dir/apt.log" 2>&1
    local status=$?
    [ -n "$added" ] && rm -f "$policy"
    return $status
}

_cp_redis_up() {
    command -v redis-cli >/dev/null 2>&1 &&
        [ "$(redis-cli -h 127.0.0.1 -p "$_cp_redis_port" ping 2>/dev/null)" = PONG ]
}

_cp_start_redis() {
    local server
    server="$(command -v redis-server || true)"
    if [ -z "$server" ]; then
        _cp_log "installing redis-server"
        _cp_apt_install redis-server || { _cp_log "redis-server could not be installed"; return 1; }
        server="$(command -v redis-server || true)"
        [ -n "$server" ] || return 1
    fi
    export CACHEPILOT_TEST_REDIS_SERVER="$server"
    if ! _cp_redis_up; then
        mkdir -p "$_cp_services_dir/redis"
        "$server" --bind 127.0.0.1 --port "$_cp_redis_port" --save "" --appendonly no \
            --daemonize yes --dir "$_cp_services_dir/redis" \
            --pidfile "$_cp_services_dir/redis/redis.pid" \
            --logfile "$_cp_services_dir/redis/redis.log" || return 1
        _cp_started_redis=1
        local i
        for i in $(seq 50); do _cp_redis_up && break; sleep 0.1; done
        _cp_redis_up || { _cp_log "redis did not answer on port $_cp_redis_port"; return 1; }
    fi
    export CACHEPILOT_TEST_REDIS_URL="redis://127.0.0.1:$_cp_redis_port/0"
    _cp_log "redis on 127.0.0.1:$_cp_redis_port"
}

_cp_pg_bin() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && { echo "$dir"; return 0; }
    done
    return 1
}

_cp_start_postgres() {
    local bin data="$_cp_services_dir/pg/data" sock="$_cp_services_dir/pg/sock"
    bin="$(_cp_pg_bin || true)"
    if [ -z "$bin" ]; then
        _cp_log "installing postgresql"
        _cp_apt_install postgresql || { _cp_log "postgresql could not be installed"; return 1; }
        bin="$(_cp_pg_bin || true)"
        [ -n "$bin" ] || return 1
    fi
    export CACHEPILOT_TEST_PG_BIN="$bin"
    if ! "$bin/pg_isready" -q -h 127.0.0.1 -p "$_cp_pg_port"; then
        mkdir -p "$_cp_services_dir/pg"
        chmod 755 "$_cp_services_dir" "$_cp_services_dir/pg"
        [ "$(id -u)" = 0 ] && chown postgres: "$_cp_services_dir/pg"
        if [ ! -s "$data/PG_VERSION" ]; then
            rm -rf "$data"
            _cp_as_postgres "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 \
                --no-sync >"$_cp_services_dir/initdb.log" 2>&1 || {
                _cp_log "initdb failed (see $_cp_services_dir/initdb.log)"
                return 1
            }
        fi
        _cp_as_postgres mkdir -p "$sock"
        _cp_as_postgres "$bin/pg_ctl" -D "$data" -l "$_cp_services_dir/pg/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $_cp_pg_port -c unix_socket_directories=$sock \
                -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
                -c max_connections=300" start >/dev/null || {
            _cp_log "postgres did not start (see $_cp_services_dir/pg/server.log)"
            return 1
        }
        _cp_started_pg="$data"
    fi
    export CACHEPILOT_TEST_POSTGRES_URL="postgresql://postgres@127.0.0.1:$_cp_pg_port/postgres"
    _cp_log "postgres on 127.0.0.1:$_cp_pg_port"
}

_cp_stop_services() {
    if [ -n "$_cp_started_redis" ] && [ -s "$_cp_services_dir/redis/redis.pid" ]; then
        kill "$(cat "$_cp_services_dir/redis/redis.pid")" 2>/dev/null || true
    fi
    if [ -n "$_cp_started_pg" ] && [ -n "${CACHEPILOT_TEST_PG_BIN:-}" ]; then
        _cp_as_postgres "$CACHEPILOT_TEST_PG_BIN/pg_ctl" -D "$_cp_started_pg" -m fast -w stop \
            >/dev/null 2>&1 || true
    fi
}

mkdir -p "$_cp_services_dir" 2>/dev/null || true
_cp_start_redis || _cp_log "no Redis server: the Redis tests will skip"
_cp_start_postgres || _cp_log "no PostgreSQL server: the PostgreSQL tests will skip"
trap _cp_stop_services EXIT
