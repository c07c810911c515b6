#!/bin/bash
# 180-ssh-host-keys: how the ssh protocol (block/ssh.c) trusts a server and
# authenticates, against qemu-img 7.2 on a private sshd (iotests/sshd.sh):
# host-key-check none, hash (md5, sha1, sha256 of the test host key, right
# and wrong, in the URI and as json's host-key-check.*), known_hosts
# (missing, unknown host, another key, another key type, the right key);
# the user's key from ~/.ssh, else from ssh-agent, else refused (never a
# password prompt); json's option checks; and QEMU iotest 162's ssh lines.
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/sshd.sh"
ssh_requires
ssh_start
ssh_env
F=$SCRATCH/a.raw
U=$SSH_URI/a.raw
"$QEMU_IMG" create -q -f raw a.raw 64k || exit 1
J="'driver': 'ssh', 'server.host': '127.0.0.1', 'server.port': '$SSH_PORT', 'path': '$F'"

# known_hosts (the default): missing, an unknown host, another key, another
# key type, the right key
same_as_qemu_err info "$U"
echo "[127.0.0.1]:1 $(cut -d' ' -f1-2 host_key.pub)" >home/.ssh/known_hosts
same_as_qemu_err info "$U"
ssh-keygen -q -t ed25519 -N '' -f other_key || exit 1
ssh_known_host other_key
same_as_qemu_err info "$U"
same_as_qemu_err info "json:{$J, 'host-key-check.mode': 'known_hosts'}"
ssh-keygen -q -t ecdsa -N '' -f ecdsa_key || exit 1
ssh_known_host ecdsa_key
same_as_qemu_err info "$U"
ssh_known_host
same_as_qemu_err info "$U"
same_as_qemu_err info "$U?host_key_check=yes"
rm home/.ssh/known_hosts

# none, and hashes of the host key (hex, colons allowed)
blob=$(cut -d' ' -f2 host_key.pub)
hex() { python3 -c "import base64,hashlib,sys; print(hashlib.new('$1', base64.b64decode('$blob')).hexdigest())"; }
sha256=$(hex sha256)
same_as_qemu_err info "$U?host_key_check=no"
same_as_qemu_err info "$U?host_key_check=sha256:$sha256"
same_as_qemu_err info "$U?host_key_check=sha1:$(hex sha1)"
same_as_qemu_err info "$U?host_key_check=md5:$(hex md5 | sed 's/../&:/g; s/:$//')"
same_as_qemu_err info "$U?host_key_check=sha256:${sha256%?}0"
same_as_qemu_err info "$U?host_key_check=sha256:${sha256}00"
same_as_qemu_err info "$U?host_key_check=md5:xyz"
same_as_qemu_err info "$U?host_key_check=sha512:$sha256"
same_as_qemu_err info "json:{$J, 'host-key-check': {'mode': 'none'}}"
same_as_qemu_err info "json:{$J, 'host-key-check': {'mode': 'hash', 'type': 'sha256', 'hash': '$sha256'}}"
same_as_qemu_err info "json:{$J, 'host-key-check': {'mode': 'hash', 'type': 'sha1', 'hash': '00'}}"
same_as_qemu_err info --image-opts "driver=ssh,server.host=127.0.0.1,server.port=$SSH_PORT,path=$F,host-key-check.mode=hash,host-key-check.type=sha256,host-key-check.hash=$sha256"
same_as_qemu_err info "json:{$J, 'host_key_check': 'no'}"
# json's checks of host-key-check and the other options
for o in "'host-key-check.mode': 'foo'" "'host-key-check.mode': 'hash'" \
    "'host-key-check': {'mode': 'hash', 'type': 'sha256'}" \
    "'host-key-check': {'mode': 'hash', 'type': 'sha512', 'hash': '00'}" \
    "'host-key-check': {'mode': 'none', 'type': 'sha256'}" \
    "'host-key-check.type': 'md5'" "'host_key_check': 'maybe'" "'foo': 1" \
    "'server.foo': 1"; do
    same_as_qemu_err info "json:{$J, $o}"
done
same_as_qemu_err info "json:{'driver': 'ssh', 'port': 22, 'path': '/x'}"
same_as_qemu_err info "json:{'driver': 'ssh', 'server.host': '127.0.0.1', 'path': '/x'}"
same_as_qemu_err info "json:{'driver': 'ssh', 'server.host': '127.0.0.1', 'server.port': '22'}"
same_as_qemu_err info "json:{'driver': 'ssh', 'server.host': '127.0.0.1', 'server.port': 'ssh', 'path': '/x'}"

# authentication: the key in ~/.ssh, else ssh-agent's, else refused
mv home/.ssh/id_ed25519 key && mv home/.ssh/id_ed25519.pub key.pub || exit 1
same_as_qemu_err info "$U?host_key_check=no"
assert_rc "no identity: no prompt, no hang" 1 timeout 30 "$QIMG" info "$U?host_key_check=no"
mv key home/.ssh/id_ed25519 && mv key.pub home/.ssh/id_ed25519.pub || exit 1
ssh_agent_start
mv home/.ssh/id_ed25519 key || exit 1
same_as_qemu_err info "$U?host_key_check=no"
same_as_qemu_err info "ssh://$(id -un)@127.0.0.1:$SSH_PORT$F?host_key_check=no"

# QEMU's 162: port as a string and as a number, converted; 0.42 refused
same_as_qemu_err info "json:{'driver': 'ssh', 'host': 'localhost', 'port': '0', 'path': '/foo'}"
same_as_qemu_err info --image-opts driver=ssh,host=localhost,port=0,path=/foo
same_as_qemu_err info "json:{'driver': 'ssh', 'host': 'localhost', 'port': 0.42, 'path': '/foo'}"
same_as_qemu_err info --image-opts driver=ssh,host=localhost,port=0.42,path=/foo
same_as_qemu_err info "ssh://127.0.0.1:0/foo"
same_as_qemu_err info "json:{'driver': 'ssh', 'host': 'no-such-host.invalid', 'path': '/foo'}"

finish
