// powercut corpus driver for hashicorp/raft-wal, used as hashicorp/raft uses its LogStore.
//
// `driver run`: opens a WAL in ./wal (raft-wal's Open, WithSegmentSize), then runs n operations,
// each one commit: `powercut-mark begin:k` before, `ack:k` after the call returned.  Operation k is a
// StoreLogs of the next `batch` entries (raft-wal fsyncs a batch before StoreLogs returns), except
// every trunc_every-th one, which is a DeleteRange of the last `trunc` entries (a tail truncation,
// as raft does when a new leader's log conflicts with a follower's), after which the log goes on
// from the truncated index with new data.  Params (POWERCUT_PARAMS): n (60), batch (4), trunc_every
// (7; 0: never), trunc (3), value_size (256), segment (WithSegmentSize, 1 MiB).
//
// `driver check`: reads the checker input (JSON on stdin), replays the same operation sequence in
// memory to know the log the acked operations leave (and the one the operation begun but not
// acked may leave), reopens ./wal with the same options (raft-wal's own recovery) and reads every
// index back with GetLog: an index the acked operations leave that is missing is a lost ack, one
// with other data, an index that should not exist, or an open/read error is corrupt data (the
// error raft-wal returns, verbatim).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

const walDir = "wal"

type params struct {
	N, Batch, TruncEvery, Trunc, ValueSize, Segment int
}

func paramsFrom(m map[string]interface{}) params {
	get := func(k string, d int) int {
		switch v := m[k].(type) {
		case float64:
			return int(v)
		case string:
			if i, err := strconv.Atoi(v); err == nil {
				return i
			}
		}
		return d
	}
	return params{
		N:          get("n", 60),
		Batch:      get("batch", 4),
		TruncEvery: get("trunc_every", 7),
		Trunc:      get("trunc", 3),
		ValueSize:  get("value_size", 256),
		Segment:    get("segment", 1<<20),
	}
}

// op k: a store of entries [first, first+count) or a truncation of [first, last]
type op struct {
	k           int
	truncate    bool
	first, last uint64
}

// ops: the deterministic operation sequence the params give
func ops(p params) []op {
	var out []op
	last := uint64(0)
	for k := 1; k <= p.N; k++ {
		if p.TruncEvery > 0 && k%p.TruncEvery == 0 && last > uint64(p.Trunc) && p.Trunc > 0 {
			o := op{k: k, truncate: true, first: last - uint64(p.Trunc) + 1, last: last}
			last = o.first - 1
			out = append(out, o)
			continue
		}
		o := op{k: k, first: last + 1, last: last + uint64(p.Batch)}
		last = o.last
		out = append(out, o)
	}
	return out
}

// value of entry idx as written by op k: deterministic, value_size bytes
func valueOf(idx uint64, k int, size int) []byte {
	head := fmt.Sprintf("entry-%d-op-%d-", idx, k)
	v := make([]byte, 0, size)
	v = append(v, head...)
	x := (idx*0x9E3779B97F4A7C15 ^ uint64(k)*0xBF58476D1CE4E5B9) | 1
	for len(v) < size {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v = append(v, byte('a'+x%26))
	}
	return v
}

func open(p params) (*wal.WAL, error) {
	return wal.Open(walDir, wal.WithSegmentSize(p.Segment))
}

func mark(text string) {
	if err := exec.Command("powercut-mark", text).Run(); err != nil {
		fmt.Fprintf(os.Stderr, "powercut-mark %s: %v\n", text, err)
		os.Exit(2)
	}
}

func readParams() params {
	m := map[string]interface{}{}
	if raw := os.Getenv("POWERCUT_PARAMS"); raw != "" {
		_ = json.Unmarshal([]byte(raw), &m)
	}
	return paramsFrom(m)
}

func run() int {
	p := readParams()
	if err := os.MkdirAll(walDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "mkdir:", err)
		return 1
	}
	w, err := open(p)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open failed:", err)
		return 1
	}
	for _, o := range ops(p) {
		mark(fmt.Sprintf("begin:%d", o.k))
		if o.truncate {
			if err := w.DeleteRange(o.first, o.last); err != nil {
				fmt.Fprintf(os.Stderr, "DeleteRange(%d, %d): %v\n", o.first, o.last, err)
				return 1
			}
		} else {
			logs := make([]*raft.Log, 0, o.last-o.first+1)
			for i := o.first; i <= o.last; i++ {
				logs = append(logs, &raft.Log{Index: i, Term: uint64(o.k), Type: raft.LogCommand, Data: valueOf(i, o.k, p.ValueSize)})
			}
			if err := w.StoreLogs(logs); err != nil {
				fmt.Fprintf(os.Stderr, "StoreLogs(%d..%d): %v\n", o.first, o.last, err)
				return 1
			}
		}
		mark(fmt.Sprintf("ack:%d", o.k))
	}
	if err := w.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 1
	}
	return 0
}

// logState: index -> the op that wrote it
type logState map[uint64]int

func apply(s logState, o op) logState {
	n := logState{}
	for k, v := range s {
		n[k] = v
	}
	for i := o.first; i <= o.last; i++ {
		if o.truncate {
			delete(n, i)
		} else {
			n[i] = o.k
		}
	}
	return n
}

type input struct {
	Mount  string                 `json:"mount"`
	Acked  []interface{}          `json:"acked"`
	Begun  []interface{}          `json:"begun"`
	Params map[string]interface{} `json:"params"`
}

func keySet(a []interface{}) map[int]bool {
	out := map[int]bool{}
	for _, v := range a {
		var s string
		switch x := v.(type) {
		case string:
			s = x
		default:
			s = fmt.Sprint(x)
		}
		if i, err := strconv.Atoi(s); err == nil {
			out[i] = true
		}
	}
	return out
}

func verdict(v string, reasons ...string) int {
	if reasons == nil {
		reasons = []string{}
	}
	b, _ := json.Marshal(map[string]interface{}{"verdict": v, "reasons": reasons})
	fmt.Println(string(b))
	return 0
}

// compare: how the store's contents differ from a log state: missing indexes, other differences
func compare(got map[uint64][]byte, want logState, p params) (missing []uint64, bad []string) {
	for idx, k := range want {
		v, ok := got[idx]
		if !ok {
			missing = append(missing, idx)
			continue
		}
		if string(v) != string(valueOf(idx, k, p.ValueSize)) {
			bad = append(bad, fmt.Sprintf("index %d does not hold what acked op %d wrote (%d bytes: %.40q)", idx, k, len(v), v))
		}
	}
	for idx := range got {
		if _, ok := want[idx]; !ok {
			bad = append(bad, fmt.Sprintf("index %d is present but was never written or was deleted", idx))
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
	sort.Strings(bad)
	return
}

func checkInner(in input) int {
	p := paramsFrom(in.Params)
	acked := keySet(in.Acked)
	begun := keySet(in.Begun)
	if _, err := os.Stat(walDir); errors.Is(err, os.ErrNotExist) {
		if len(acked) == 0 {
			return verdict("pass")
		}
		return verdict("lost-ack", fmt.Sprintf("%d acked operations but no wal directory", len(acked)))
	}
	// the log the acked operations leave, and the one the operation in flight may leave
	seq := ops(p)
	want := logState{}
	var inflight *op
	for i := range seq {
		o := seq[i]
		if acked[o.k] {
			want = apply(want, o)
		} else if begun[o.k] {
			inflight = &seq[i]
			break
		} else {
			break
		}
	}
	w, err := open(p)
	if err != nil {
		return verdict("corrupt-data", "open failed: "+err.Error())
	}
	first, err := w.FirstIndex()
	if err != nil {
		return verdict("corrupt-data", "FirstIndex failed: "+err.Error())
	}
	last, err := w.LastIndex()
	if err != nil {
		return verdict("corrupt-data", "LastIndex failed: "+err.Error())
	}
	got := map[uint64][]byte{}
	var errs []string
	if last > 0 {
		for idx := first; idx <= last; idx++ {
			var l raft.Log
			if err := w.GetLog(idx, &l); err != nil {
				errs = append(errs, fmt.Sprintf("GetLog(%d) failed: %v", idx, err))
				continue
			}
			got[idx] = append([]byte(nil), l.Data...)
		}
	}
	if len(errs) > 0 {
		n := len(errs)
		if n > 10 {
			errs = append(errs[:10], fmt.Sprintf("... %d GetLog errors in all (first %d, last %d)", n, first, last))
		}
		return verdict("corrupt-data", errs...)
	}
	missing, bad := compare(got, want, p)
	if len(missing) == 0 && len(bad) == 0 {
		return verdict("pass")
	}
	if inflight != nil {
		m2, b2 := compare(got, apply(want, *inflight), p)
		if len(m2) == 0 && len(b2) == 0 {
			return verdict("pass")
		}
	}
	if len(bad) > 0 {
		if len(bad) > 10 {
			bad = bad[:10]
		}
		return verdict("corrupt-data", bad...)
	}
	strs := make([]string, 0, len(missing))
	for i, m := range missing {
		if i == 20 {
			strs = append(strs, "...")
			break
		}
		strs = append(strs, strconv.FormatUint(m, 10))
	}
	return verdict("lost-ack", fmt.Sprintf("%d acked log entries missing after reopen (log is %d..%d): %s", len(missing), first, last, strings.Join(strs, ",")))
}

func check() int {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		return verdict("corrupt-data", "checker: cannot read stdin: "+err.Error())
	}
	var in input
	_ = json.Unmarshal(raw, &in)
	if in.Mount != "" {
		_ = os.Chdir(in.Mount)
	}
	code := 0
	func() {
		defer func() {
			if r := recover(); r != nil {
				code = verdict("corrupt-data", fmt.Sprintf("raft-wal panicked on recovery: %v", r))
			}
		}()
		code = checkInner(in)
	}()
	return code
}

func main() {
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "run":
		os.Exit(run())
	case "check":
		os.Exit(check())
	default:
		fmt.Fprintln(os.Stderr, "usage: driver run|check")
		os.Exit(2)
	}
}
