# iotests/sshd.sh: a private sshd for the ssh protocol's tests (179, 180),
# sourced after common.sh.
#
# ssh_start starts OpenSSH's sshd on a free unprivileged port of 127.0.0.1
# in the scratch folder: its own host key (host_key), the user's key
# (home/.ssh/id_ed25519) as the only authorized key, SFTP by internal-sftp,
# no password or PAM.  sshd is stopped by its PID when the test exits.
#
# libssh (qimg's and QEMU's) takes the home folder from the password
# database, not $HOME, so the tools run under nss_wrapper with a passwd
# whose entry for the current user has home/ as its home: ~/.ssh/id_*,
# ~/.ssh/known_hosts and ~/.ssh/config are the test's.  ssh_env exports
# that for the tools (never for sshd).  Sets SSH_PORT and SSH_URI
# (ssh://127.0.0.1:PORT/SCRATCH: a folder name for the test's files).

_nss_wrapper=/usr/lib/x86_64-linux-gnu/libnss_wrapper.so
SSHD=${SSHD:-/usr/sbin/sshd}
_sshd_pid=
_agent_pid=

_ssh_cleanup() {
    [ -n "$_agent_pid" ] && kill "$_agent_pid" 2>/dev/null
    if [ -n "$_sshd_pid" ]; then
        kill "$_sshd_pid" 2>/dev/null
        gone "$_sshd_pid"
    fi
    _cleanup
}
trap _ssh_cleanup EXIT

ssh_requires() {
    requires qimg qemu-img qemu-io ssh-keygen ssh-agent ssh-add
    [ -x "$SSHD" ] || missing "sshd not found ($SSHD; Debian: openssh-server)"
    [ -e "$_nss_wrapper" ] || missing "nss_wrapper not found (Debian: libnss-wrapper)"
    "$QEMU_IMG" --help | grep -q ' ssh ' ||
        missing "qemu-img has no ssh driver (Debian: qemu-block-extra)"
    "$QIMG" info ssh://127.0.0.1:1/x 2>&1 | grep -q 'built without SSH' &&
        missing "qimg built without SSH (libssh-dev)"
    if [ ! -d /run/sshd ]; then
        # sshd's privilege separation folder (the openssh-server service
        # makes it at boot)
        [ "$(id -u)" = 0 ] && mkdir -p /run/sshd || missing "/run/sshd missing"
    fi
}

ssh_env() {
    export LD_PRELOAD=$_nss_wrapper NSS_WRAPPER_PASSWD=$SCRATCH/passwd \
        NSS_WRAPPER_GROUP=/etc/group HOME=$SCRATCH/home
}

ssh_start() {
    local i _i
    mkdir -p home/.ssh && chmod 700 home/.ssh || exit 1
    ssh-keygen -q -t ed25519 -N '' -C test-host -f host_key || exit 1
    ssh-keygen -q -t ed25519 -N '' -C test-user -f home/.ssh/id_ed25519 || exit 1
    cp home/.ssh/id_ed25519.pub authorized_keys || exit 1
    getent passwd "$(id -u)" |
        awk -F: -v h="$SCRATCH/home" 'BEGIN{OFS=":"} {$6=h; print}' >passwd
    for i in 1 2 3 4 5; do
        SSH_PORT=$(tcp_port)
        "$SSHD" -D -e -f /dev/null -p "$SSH_PORT" -o ListenAddress=127.0.0.1 \
            -h "$SCRATCH/host_key" -o AuthorizedKeysFile="$SCRATCH/authorized_keys" \
            -o StrictModes=no -o PidFile=none -o 'Subsystem=sftp internal-sftp' \
            -o UsePAM=no -o PasswordAuthentication=no \
            -o KbdInteractiveAuthentication=no >sshd.log 2>&1 &
        _sshd_pid=$!
        # until it listens or ends (a bound of 60 s, not a guess at how
        # long starting takes: 5 s before, and a slower start was killed
        # and tried again)
        for ((_i = 0; _i < 1200; _i++)); do
            holds sshd.log 'Server listening' && break
            kill -0 "$_sshd_pid" 2>/dev/null || break
            _nap 0.05
        done
        if holds sshd.log 'Server listening'; then
            SSH_URI=ssh://127.0.0.1:$SSH_PORT$SCRATCH
            return 0
        fi
        kill "$_sshd_pid" 2>/dev/null
        gone "$_sshd_pid"
        _sshd_pid=
    done
    echo "sshd did not start:"
    cat sshd.log
    exit 1
}

# ssh_known_host [KEYFILE]: home/.ssh/known_hosts names the server with
# KEYFILE's public key (default: the server's own).
ssh_known_host() {
    echo "[127.0.0.1]:$SSH_PORT $(cut -d' ' -f1-2 "${1:-host_key}.pub")" \
        >home/.ssh/known_hosts
}

# ssh_agent_start: an ssh-agent holding the user's key (SSH_AUTH_SOCK),
# stopped by its PID when the test exits.
ssh_agent_start() {
    eval "$(ssh-agent -s -a "$SCRATCH/agent.sock")" >/dev/null || exit 1
    _agent_pid=$SSH_AGENT_PID
    ssh-add -q home/.ssh/id_ed25519 2>/dev/null || exit 1
}
