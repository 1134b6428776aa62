// Command rook-pool-oracle checks a CephFilesystem with Rook's own pool validation.
//
// It reads one CephFilesystem (JSON) on stdin, decodes it strictly into Rook's
// ceph.rook.io/v1 Go types (an unknown field is an error, as a typo would be lost on a
// real cluster), and runs github.com/rook/rook/pkg/operator/ceph/pool.ValidatePoolSpec on
// the metadata pool and on every data pool, as Rook's file system controller does before it
// creates any pool. The cluster spec is a plain (non-stretch) CephCluster spec, and no Ceph
// cluster is reachable: a pool whose check would need the CRUSH map (failureDomain,
// crushRoot, device classes) is reported as not checkable.
//
// Output (stdout, one JSON object): {"valid": bool, "pools": [{"pool", "error"}]}; the exit
// status is 0 when every pool passes, 1 when Rook refuses one, 2 on unreadable input.
//
// Built by hack/oracles/rook/build from the Rook module at a pinned version; no Rook code
// lives in this repository.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	cephv1 "github.com/rook/rook/pkg/apis/ceph.rook.io/v1"
	"github.com/rook/rook/pkg/clusterd"
	cephclient "github.com/rook/rook/pkg/daemon/ceph/client"
	"github.com/rook/rook/pkg/operator/ceph/pool"
)

type verdict struct {
	Pool  string `json:"pool"`
	Error string `json:"error,omitempty"`
}

type report struct {
	Valid bool      `json:"valid"`
	Pools []verdict `json:"pools"`
}

func check(spec cephv1.PoolSpec) (msg string) {
	defer func() {
		// ValidatePoolSpec only calls into Ceph for CRUSH checks; without a cluster that
		// panics on the empty context, which means "cannot be judged here", never "valid".
		if r := recover(); r != nil {
			msg = fmt.Sprintf("not checkable without a Ceph cluster: %v", r)
		}
	}()
	err := pool.ValidatePoolSpec(&clusterd.Context{}, &cephclient.ClusterInfo{}, &cephv1.ClusterSpec{}, &spec)
	if err != nil {
		return err.Error()
	}
	return ""
}

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var fs cephv1.CephFilesystem
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fs); err != nil {
		fmt.Fprintf(os.Stderr, "not a ceph.rook.io/v1 CephFilesystem: %v\n", err)
		os.Exit(2)
	}
	out := report{Valid: true}
	add := func(name string, spec cephv1.PoolSpec) {
		v := verdict{Pool: name, Error: check(spec)}
		if v.Error != "" {
			out.Valid = false
		}
		out.Pools = append(out.Pools, v)
	}
	add("metadataPool", fs.Spec.MetadataPool.PoolSpec)
	for _, p := range fs.Spec.DataPools {
		add("dataPools/"+p.Name, p.PoolSpec)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(2)
	}
	if !out.Valid {
		os.Exit(1)
	}
}
