#!/usr/bin/env bash
# What bench/registrar.sh needs beyond bench/deps.sh (which it runs first), installed from Debian
# only when missing, saying first what and why (nothing is printed or installed when all is present):
#   kamailio, kamailio-redis-modules, kamailio-memcached-modules
#                the peer registrar: usrloc in memory, written through to Redis, HA1s and contacts in Memcached
#   redis-server, redis-tools   the Redis backend of both servers (redis-cli sets Kamailio's table version)
#   memcached    the Memcached backend of both servers
# Usage: bench/deps-registrar.sh
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
bash "$(dirname "$0")/deps.sh"
source "$(dirname "$0")/lib/apt.sh"
modules=/usr/lib/x86_64-linux-gnu/kamailio/modules
need kamailio /usr/sbin/kamailio "the peer registrar"
need kamailio-redis-modules $modules/ndb_redis.so "Kamailio's usrloc written through to Redis (db_redis)"
need kamailio-memcached-modules $modules/memcached.so "Kamailio's HA1s and contacts in Memcached"
need redis-server /usr/bin/redis-server "the Redis backend of both servers"
need redis-tools /usr/bin/redis-cli "redis-cli, which sets Kamailio's table version in Redis"
need memcached /usr/bin/memcached "the Memcached backend of both servers"
install_missing bench/deps-registrar.sh
