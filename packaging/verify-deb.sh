#!/usr/bin/env bash
# The Debian package, as an operator gets it: builds it (packaging/build-deb.sh:
# dpkg-buildpackage, then lintian with no error or warning), installs it with
# dpkg -i, checks its files, its conffile and its units, that the installed
# daemon accepts the installed configuration, then removes it (the conffile
# stays) and purges it (the conffile goes). Needs root (dpkg -i); no service
# manager needs to run (the units are enabled, not started, without one).
# Exit 0: all held; 1: one did not (said); 77: cannot check here (said).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
skip() { echo "SKIPPED: Debian package check: $*" >&2; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "dpkg -i needs root"
command -v dpkg-buildpackage >/dev/null || skip "dpkg-buildpackage is missing (packaging/install-deps.sh --test)"
command -v lintian >/dev/null || skip "lintian is missing (packaging/install-deps.sh --test)"
if dpkg-query -W -f='${db:Status-Abbrev}' nodewatch 2>/dev/null | grep -q '^[ir]'; then
  skip "a nodewatch package is installed on this machine already: not replaced by a test"
fi
fail() { echo "FAILED: $*" >&2; exit 1; }
out=$(mktemp -d)
trap 'dpkg -P nodewatch >/dev/null 2>&1 || true; rm -rf "$out"' EXIT

# The package an operator installs, without its debug-symbol companion
# (nodewatch-dbgsym): compressing that one's 34 MB took 15 of the 62 s of
# dpkg-buildpackage, and nothing here installs it.
DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:+$DEB_BUILD_OPTIONS }noautodbgsym" \
  "$root/packaging/build-deb.sh" "$out" || fail "the package did not build or lintian found an error or warning"
deb=$(ls "$out"/nodewatch_*_"$(dpkg-architecture -qDEB_HOST_ARCH)".deb)
[[ $(basename "$deb") =~ ^nodewatch_[0-9][0-9.]*_[a-z0-9]+\.deb$ ]] || fail "not Debian's file name: $deb"
section=$(dpkg-deb -f "$deb" Section)
[[ $section == admin ]] || fail "section $section, not admin"

dpkg -i "$deb" >/dev/null || fail "dpkg -i"
for f in /usr/sbin/nodewatchd /usr/libexec/nodewatch/nwd-pod-resources /usr/libexec/nodewatch/nwd-bmc \
  /usr/bin/nodewatch-soak-report /etc/nodewatch/nodewatch.toml \
  /lib/systemd/system/nodewatch.service /lib/systemd/system/nodewatch.socket \
  /usr/share/man/man8/nodewatchd.8.gz /usr/share/man/man1/nodewatch-soak-report.1.gz \
  /usr/share/nodewatch/dashboards/nodewatch-node.json /usr/share/nodewatch/alerts/nodewatch-rules.yml \
  /usr/share/nodewatch/systemd/uncore.conf \
  /usr/share/doc/nodewatch/copyright; do
  [[ -e $f ]] || fail "the package did not install $f"
done
grep -qx /etc/nodewatch/nodewatch.toml /var/lib/dpkg/info/nodewatch.conffiles ||
  fail "/etc/nodewatch/nodewatch.toml is not a conffile"
/usr/sbin/nodewatchd --check-config --config /etc/nodewatch/nodewatch.toml | grep -q '^configuration OK' ||
  fail "the installed nodewatchd refuses the installed configuration"
# The revision it reports is the checkout's, as a plain build reports it.
rev=$("$root/packaging/revision.sh")
version=$(/usr/sbin/nodewatchd --version) || fail "nodewatchd --version"
[[ $version == *"(revision $rev)"* ]] || fail "nodewatchd --version says '$version', not revision $rev"
grep -q '^Documentation=man:nodewatchd(8)' /lib/systemd/system/nodewatch.service ||
  fail "the unit does not name the man page"
# Enabled (by dh_installsystemd's postinst), the socket left off.
[[ -L /etc/systemd/system/multi-user.target.wants/nodewatch.service ]] ||
  fail "nodewatch.service is not enabled"
[[ ! -e /etc/systemd/system/sockets.target.wants/nodewatch.socket ]] ||
  fail "nodewatch.socket is enabled"

# An edited configuration survives a removal; a purge takes it.
echo '# edited by the operator' >>/etc/nodewatch/nodewatch.toml
dpkg -r nodewatch >/dev/null || fail "dpkg -r"
[[ ! -e /usr/sbin/nodewatchd ]] || fail "dpkg -r left /usr/sbin/nodewatchd"
grep -q 'edited by the operator' /etc/nodewatch/nodewatch.toml 2>/dev/null ||
  fail "dpkg -r did not keep the conffile"
dpkg -P nodewatch >/dev/null || fail "dpkg -P"
[[ ! -e /etc/nodewatch/nodewatch.toml ]] || fail "dpkg -P left the conffile"
[[ ! -e /etc/systemd/system/multi-user.target.wants/nodewatch.service ]] ||
  fail "dpkg -P left the service enabled"
echo "Debian package: $(basename "$deb") built, lintian clean, installed, configuration OK, removed (conffile kept), purged"
