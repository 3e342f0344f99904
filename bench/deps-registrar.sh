#!/usr/bin/env bash
# What bench/registrar.sh needs beyond bench/deps.sh, installed from Debian only when missing:
# Kamailio (the peer registrar, with its Redis and Memcached modules), redis-server and memcached (the backends).
set -euo pipefail
bash "$(dirname "$0")/deps.sh"
declare -A want=([kamailio]=/usr/sbin/kamailio [kamailio-redis-modules]=/usr/lib/x86_64-linux-gnu/kamailio/modules/ndb_redis.so
                 [kamailio-memcached-modules]=/usr/lib/x86_64-linux-gnu/kamailio/modules/memcached.so
                 [redis-server]=/usr/bin/redis-server [redis-tools]=/usr/bin/redis-cli [memcached]=/usr/bin/memcached)
missing=()
for pkg in "${!want[@]}"; do
  [[ -e ${want[$pkg]} ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "bench/deps-registrar.sh: installing ${missing[*]}"
  sudo=""
  ((EUID == 0)) || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
