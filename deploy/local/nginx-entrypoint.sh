#!/bin/sh
# What the official nginx image does at start with /etc/nginx/templates/*.template: each is filled with the
# variables set in the environment (envsubst, only those, so nginx's own $variables stay) and written to
# /etc/nginx/conf.d/NAME (without .template), which Debian's nginx.conf includes in its http{} block.
set -eu
defined=$(env | cut -d= -f1 | sed 's/.*/${&}/' | tr '\n' ' ')
for template in /etc/nginx/templates/*.template; do
  [ -f "$template" ] || continue
  out="/etc/nginx/conf.d/$(basename "$template" .template)"
  envsubst "$defined" < "$template" > "$out"
  echo "nginx-entrypoint: $template -> $out" >&2
done
exec "$@"
