// The pinned etcd server: etcd's own entry point, nothing else (build.sh pins the release).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
