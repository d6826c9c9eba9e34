#!/usr/bin/env bash
# Makes the x509 credentials of the TLS tests in DIR with openssl:
#   DIR/server/   server-cert.pem server-key.pem ca-cert.pem   (larch serve --tls-certificates)
#   DIR/alice/    client-cert.pem client-key.pem ca-cert.pem   (libnbd/qemu client directories)
#   DIR/bob/      another client of the same CA
#   DIR/expired/  "alice" again, with a certificate that expired in 2021
#   DIR/rogue/    "alice" signed by another CA
#   DIR/nocert/   only ca-cert.pem (a client without a certificate)
#   DIR/wrongca/  only the other CA's ca-cert.pem (cannot verify the server)
#   DIR/mismatch/ server-cert.pem with bob's key (a key that is not the certificate's)
#   DIR/encrypted/ server-cert.pem with its key encrypted by a passphrase
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
quiet() { "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; "$@"; exit 1; }; }
key() { quiet openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
ca() { # NAME CN
    key "$1-key.pem"
    quiet openssl req -x509 -new -key "$1-key.pem" -out "$1-cert.pem" -days 3650 -subj "/CN=$2" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
sign() { # CA OUT-CERT KEY CN EXTENSIONS [START END]
    local ca=$1 out=$2 k=$3 cn=$4 ext=$5
    quiet openssl req -new -key "$k" -out "$out.csr" -subj "/CN=$cn/O=larch tests"
    printf '%b\n' "$ext" >"$out.ext"
    if [ $# -ge 7 ]; then
        # openssl x509 cannot back-date; a throwaway `openssl ca` database can.
        mkdir -p "$out.db"
        : >"$out.db/index.txt"
        cat >"$out.db/ca.cnf" <<CNF
[ca]
default_ca = test
[test]
database = $out.db/index.txt
new_certs_dir = $out.db
serial = $out.db/serial
default_md = sha256
policy = any
copy_extensions = none
[any]
commonName = supplied
organizationName = optional
CNF
        echo 01 >"$out.db/serial"
        quiet openssl ca -batch -config "$out.db/ca.cnf" -cert "$ca-cert.pem" -keyfile "$ca-key.pem" \
            -in "$out.csr" -out "$out" -startdate "$6" -enddate "$7" -extfile "$out.ext" -notext
        rm -rf "$out.db"
    else
        quiet openssl x509 -req -in "$out.csr" -CA "$ca-cert.pem" -CAkey "$ca-key.pem" \
            -CAcreateserial -out "$out" -days 365 -extfile "$out.ext"
    fi
    rm -f "$out.csr" "$out.ext"
}
client_ext='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
server_ext='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1'

ca ca "larch test CA"
ca other "another CA"

mkdir -p server alice bob expired rogue nocert wrongca mismatch
key server/server-key.pem
sign ca server/server-cert.pem server/server-key.pem localhost "$server_ext"
cp ca-cert.pem server/
client() { # DIR CA CN [START END]
    local d=$1 c=$2 cn=$3
    shift 3
    key "$d/client-key.pem"
    sign "$c" "$d/client-cert.pem" "$d/client-key.pem" "$cn" "$client_ext" "$@"
    cp ca-cert.pem "$d/"
}
client alice ca alice
client bob ca bob
client expired ca alice 20200101000000Z 20210101000000Z
client rogue other alice
cp ca-cert.pem nocert/
cp other-cert.pem wrongca/ca-cert.pem
cp server/server-cert.pem server/ca-cert.pem mismatch/
cp bob/client-key.pem mismatch/server-key.pem
mkdir -p encrypted
cp server/server-cert.pem server/ca-cert.pem encrypted/
quiet openssl pkey -in server/server-key.pem -aes256 -passout pass:secret -out encrypted/server-key.pem
