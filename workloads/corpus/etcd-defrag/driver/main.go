// etcd-defrag: powercut's driver for a three-member etcd cluster under defragmentation
// (etcd v3.5.5 -> v3.5.6, "Fix revision might be inconsistency between members when etcd crashes
// during processing defragmentation operation", etcd-io/etcd#14733).
//
//	driver run    the workload (recording guest, cwd holds the node mounts n0, n1, n2): member i
//	              of a three-member cluster on n<i>/etcd (127.0.0.1, client port port+2i, peer port
//	              one above); `begin:up` .. `ack:up` around the bootstrap (every member healthy, then
//	              sync); commits 0..n-1 (begin:i before, ack:i once every put of it returned): by
//	              default sequential puts k<i>; with clients=C, C writers at once, writer c doing
//	              commits c, c+C, ...; with group=G a commit is G concurrent puts k<i>.0 .. k<i>.<G-1>;
//	              with txn=1 each put is a Txn (put if the key has no version yet);
//	              meanwhile a second goroutine calls Maintenance.Defragment on the members in turn,
//	              every defrag_ms (0: never); then the members are stopped (SIGTERM, SIGKILL 3 s later).
//	driver check  the checker (JSON on stdin, one verdict line on stdout): re-runs itself in a
//	              network namespace of its own (unshare --net), restarts the three members on the
//	              recovered mounts with the recorded ports (a cut before ack:up passes, etcd not
//	              started: a bootstrap cut short promises nothing), waits for a healthy majority, and
//	              checks (a) every acked put present with its value on each member (a serializable
//	              read per member, after a linearizable one brought it up to date): else lost-ack /
//	              corrupt-data; (b) the members agree: HashKV at the revision all of them reached,
//	              the same mod_revision and version of every key all of them hold, and a member
//	              further on only by puts the others lack (never acked): else corrupt-data naming the
//	              members' revisions. A member that exits is corrupt-data with etcd's own words; no
//	              healthy majority within recover_timeout is corrupt-data; a running member that never
//	              serves while a majority does is a note (see README.md: the cluster model pairs a
//	              node's late state with its peers' early ones within an instant).
//
// Params (POWERCUT_PARAMS, JSON, or `driver run KEY=VALUE ...`): n (20), size (100), seed (0), port (2379), defrag_ms (300; 0: no
// defragmentation), heartbeat_ms (200), election_ms (2000), start_timeout (300 s), put_timeout
// (120 s), recover_timeout (30 s), clients (1), group (1), txn (0). The checker needs the same
// params as the run (group and size name the keys and values).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/grpclog"
)

const (
	token    = "powercut-etcd-defrag"
	upKey    = "up"
	dataDir  = "etcd"
	innerEnv = "ETCD_DEFRAG_NETNS"
)

// ---------------------------------------------------------------- params

type params struct {
	N              int     `json:"n"`
	Size           int     `json:"size"`
	Seed           int     `json:"seed"`
	Port           int     `json:"port"`
	DefragMs       int     `json:"defrag_ms"`
	HeartbeatMs    int     `json:"heartbeat_ms"`
	ElectionMs     int     `json:"election_ms"`
	StartTimeout   float64 `json:"start_timeout"`
	PutTimeout     float64 `json:"put_timeout"`
	RecoverTimeout float64 `json:"recover_timeout"`
	Clients        int     `json:"clients"`
	Group          int     `json:"group"`
	Txn            int     `json:"txn"`
}

func defaults() params {
	return params{N: 20, Size: 100, Seed: 0, Port: 2379, DefragMs: 300, HeartbeatMs: 200,
		ElectionMs: 2000, StartTimeout: 300, PutTimeout: 120, RecoverTimeout: 30,
		Clients: 1, Group: 1, Txn: 0}
}

// parseParams reads a JSON object whose values may be numbers or strings of numbers (a command
// line's --param n=50 may arrive either way); unknown keys are ignored.
func parseParams(raw map[string]any) (params, error) {
	p := defaults()
	ints := map[string]*int{"n": &p.N, "size": &p.Size, "seed": &p.Seed, "port": &p.Port,
		"defrag_ms": &p.DefragMs, "heartbeat_ms": &p.HeartbeatMs, "election_ms": &p.ElectionMs,
		"clients": &p.Clients, "group": &p.Group, "txn": &p.Txn}
	floats := map[string]*float64{"start_timeout": &p.StartTimeout, "put_timeout": &p.PutTimeout,
		"recover_timeout": &p.RecoverTimeout}
	num := func(k string, v any) (float64, error) {
		switch x := v.(type) {
		case float64:
			return x, nil
		case string:
			f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
			if err != nil {
				return 0, fmt.Errorf("param %s: %q is not a number", k, x)
			}
			return f, nil
		case bool:
			if x {
				return 1, nil
			}
			return 0, nil
		}
		return 0, fmt.Errorf("param %s: %v is not a number", k, v)
	}
	for k, v := range raw {
		if dst, ok := ints[k]; ok {
			f, err := num(k, v)
			if err != nil {
				return p, err
			}
			*dst = int(f)
		} else if dst, ok := floats[k]; ok {
			f, err := num(k, v)
			if err != nil {
				return p, err
			}
			*dst = f
		}
	}
	if p.Clients < 1 {
		p.Clients = 1
	}
	if p.Group < 1 {
		p.Group = 1
	}
	return p, nil
}

func envParams() (params, error) {
	s := strings.TrimSpace(os.Getenv("POWERCUT_PARAMS"))
	if s == "" {
		return defaults(), nil
	}
	raw := map[string]any{}
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return defaults(), fmt.Errorf("POWERCUT_PARAMS: %v", err)
	}
	return parseParams(raw)
}

// ---------------------------------------------------------------- keys and values

func key(i int) string { return "k" + strconv.Itoa(i) }

// subKey is the j-th put of commit i: k<i> when a commit is one put (group=1), else k<i>.<j>.
func subKey(i, j, group int) string {
	if group <= 1 {
		return key(i)
	}
	return key(i) + "." + strconv.Itoa(j)
}

// subValue is the value put under subKey(i, j, group).
func subValue(seed, i, j, size, group int) string {
	if group <= 1 {
		return value(seed, i, size)
	}
	return value(seed, i*1000003+j+1, size)
}

// value is the `size` bytes put under key i: hex of SHA-256 chained from (seed, i).
func value(seed, i, size int) string {
	var b strings.Builder
	h := sha256.Sum256([]byte(fmt.Sprintf("etcd-defrag:%d:%d", seed, i)))
	for b.Len() < size {
		b.WriteString(hex.EncodeToString(h[:]))
		h = sha256.Sum256(h[:])
	}
	return b.String()[:size]
}

// ---------------------------------------------------------------- members

type member struct{ idx, clientPort, peerPort int }

func (m member) name() string      { return "m" + strconv.Itoa(m.idx) }
func (m member) clientURL() string { return "http://127.0.0.1:" + strconv.Itoa(m.clientPort) }
func (m member) peerURL() string   { return "http://127.0.0.1:" + strconv.Itoa(m.peerPort) }

type cluster struct {
	etcd    string
	members []member
	dirs    []string
	logs    string
	p       params
	cmds    []*exec.Cmd
	mu      sync.Mutex
	exited  map[int]int // member -> exit code
	done    []chan struct{}
}

func newCluster(etcd string, dirs []string, logs string, p params) *cluster {
	c := &cluster{etcd: etcd, dirs: dirs, logs: logs, p: p, exited: map[int]int{}}
	for i := range dirs {
		c.members = append(c.members, member{i, p.Port + 2*i, p.Port + 2*i + 1})
	}
	return c
}

func (c *cluster) argv(m member) []string {
	var ic []string
	for _, o := range c.members {
		ic = append(ic, o.name()+"="+o.peerURL())
	}
	return []string{c.etcd,
		"--name", m.name(),
		"--data-dir", c.dirs[m.idx],
		"--listen-client-urls", m.clientURL(),
		"--advertise-client-urls", m.clientURL(),
		"--listen-peer-urls", m.peerURL(),
		"--initial-advertise-peer-urls", m.peerURL(),
		"--initial-cluster", strings.Join(ic, ","),
		"--initial-cluster-token", token,
		"--initial-cluster-state", "new",
		"--heartbeat-interval", strconv.Itoa(c.p.HeartbeatMs),
		"--election-timeout", strconv.Itoa(c.p.ElectionMs),
	}
}

func (c *cluster) logPath(i int) string { return filepath.Join(c.logs, fmt.Sprintf("m%d.log", i)) }

func (c *cluster) start() error {
	for _, m := range c.members {
		a := c.argv(m)
		log, err := os.Create(c.logPath(m.idx))
		if err != nil {
			return err
		}
		cmd := exec.Command(a[0], a[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			log.Close()
			return fmt.Errorf("start %s: %v", a[0], err)
		}
		log.Close()
		done := make(chan struct{})
		c.cmds = append(c.cmds, cmd)
		c.done = append(c.done, done)
		go func(i int, cmd *exec.Cmd) {
			err := cmd.Wait()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				code = -1
			}
			c.mu.Lock()
			c.exited[i] = code
			c.mu.Unlock()
			close(done)
		}(m.idx, cmd)
	}
	return nil
}

func (c *cluster) exitedNow() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int]int{}
	for k, v := range c.exited {
		out[k] = v
	}
	return out
}

var httpc = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 2 * time.Second}

func healthy(url string) bool {
	r, err := httpc.Get(url + "/health")
	if err != nil {
		return false
	}
	defer r.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	if json.NewDecoder(r.Body).Decode(&h) != nil {
		return false
	}
	return h.Health == "true"
}

// waitReady: every member healthy (has a leader); false at the deadline or once a member exited.
func (c *cluster) waitReady(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if len(c.exitedNow()) > 0 {
			return false
		}
		all := true
		for _, m := range c.members {
			if !healthy(m.clientURL()) {
				all = false
				break
			}
		}
		if all {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// stop: sig to every member's process group, SIGKILL what is left after grace.
func (c *cluster) stop(grace time.Duration, sig syscall.Signal) {
	for i, cmd := range c.cmds {
		select {
		case <-c.done[i]:
		default:
			syscall.Kill(-cmd.Process.Pid, sig)
		}
	}
	deadline := time.After(grace)
	for i, cmd := range c.cmds {
		select {
		case <-c.done[i]:
		case <-deadline:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-c.done[i]
		}
	}
}

var zapLevel = regexp.MustCompile(`^\{`)

// lastError: etcd's own words for why a member stopped or stalls: its last fatal/panic record
// (zap JSON) as "msg: error"; else Go's last "panic:"/"fatal error:" line; else its last error
// record; else its last line.
func lastError(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(data) > 400000 {
		data = data[len(data)-400000:]
	}
	var fatal, errRec, crash, last string
	lines := strings.Split(string(data), "\n")
	for i, ln := range lines {
		ln = strings.TrimSpace(ln)
		if ln == "" {
			continue
		}
		last = ln
		if zapLevel.MatchString(ln) {
			var rec map[string]any
			if json.Unmarshal([]byte(ln), &rec) == nil {
				words := fmt.Sprint(rec["msg"])
				if e, ok := rec["error"]; ok {
					words += ": " + fmt.Sprint(e)
				}
				switch rec["level"] {
				case "fatal", "panic", "dpanic":
					fatal = words
				case "error":
					errRec = words
				}
			}
			continue
		}
		if strings.HasPrefix(ln, "panic: ") || strings.HasPrefix(ln, "fatal error: ") {
			crash = ln
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "[signal") {
				crash += " " + strings.TrimSpace(lines[i+1])
			}
		}
	}
	out := last
	switch {
	case fatal != "":
		out = fatal
	case crash != "":
		out = crash
	case errRec != "":
		out = errRec
	case last == "":
		out = "(no output)"
	}
	if len(out) > 300 {
		out = out[:300]
	}
	return out
}

func nodeMounts(cwd string) []string {
	ents, _ := os.ReadDir(cwd)
	var ns []int
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() && len(n) > 1 && n[0] == 'n' {
			if i, err := strconv.Atoi(n[1:]); err == nil {
				ns = append(ns, i)
			}
		}
	}
	sort.Ints(ns)
	var out []string
	for _, i := range ns {
		out = append(out, filepath.Join(cwd, "n"+strconv.Itoa(i)))
	}
	return out
}

func etcdBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(filepath.Dir(self), "etcd")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no etcd beside the driver: %v", err)
	}
	return bin, nil
}

func quietLogs() {
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
}

func client(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// ---------------------------------------------------------------- run (the workload)

// Marks go through powercut's own mark (powercut.marks.mark, what `powercut-mark TEXT` runs): one
// Python process started once, fed a mark per line and answering each once the mark is in every
// node's log -- under TCG a Python start per mark costs ~2 s, a cycle of the workload. Without a
// Python powercut-mark on PATH it runs `powercut-mark TEXT` per mark; with none at all, no marks.
var (
	markPath string
	markIn   io.WriteCloser
	markOut  *bufio.Reader
)

const markHelper = `import sys
from powercut.marks import mark
for line in sys.stdin:
    try:
        mark(line.strip())
        sys.stdout.write("ok\n")
    except Exception as e:
        sys.stdout.write("error %s\n" % str(e).replace("\n", " "))
    sys.stdout.flush()
`

func startMarks() {
	mp, err := exec.LookPath("powercut-mark")
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-defrag: no powercut-mark on PATH: marks skipped")
		return
	}
	markPath = mp
	f, err := os.Open(mp)
	if err != nil {
		return
	}
	first, _ := bufio.NewReader(f).ReadString('\n')
	f.Close()
	if !strings.HasPrefix(first, "#!") || !strings.Contains(first, "python") {
		return // not the Python one: a process per mark
	}
	interp := strings.Fields(strings.TrimPrefix(first, "#!"))
	cmd := exec.Command(interp[0], append(interp[1:], "-c", markHelper)...)
	cmd.Stderr = os.Stderr
	in, err1 := cmd.StdinPipe()
	out, err2 := cmd.StdoutPipe()
	if err1 != nil || err2 != nil || cmd.Start() != nil {
		return
	}
	markIn, markOut = in, bufio.NewReader(out)
}

var markMu sync.Mutex // the writers' marks, one at a time through the one helper

func mark(kind, k string) {
	markMu.Lock()
	defer markMu.Unlock()
	text := kind + ":" + k
	if markIn != nil {
		if _, err := io.WriteString(markIn, text+"\n"); err != nil {
			fatalf("mark %s: %v", text, err)
		}
		ans, err := markOut.ReadString('\n')
		if err != nil || strings.TrimSpace(ans) != "ok" {
			fatalf("mark %s: %v %s", text, err, strings.TrimSpace(ans))
		}
		return
	}
	if markPath == "" {
		return
	}
	out, err := exec.Command(markPath, text).CombinedOutput()
	if err != nil {
		fatalf("powercut-mark %s: %v: %s", text, err, bytes.TrimSpace(out))
	}
}

func fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "etcd-defrag: "+f+"\n", a...)
	os.Exit(1)
}

func run() {
	p, err := envParams()
	if err != nil {
		fatalf("%v", err)
	}
	if len(os.Args) > 2 { // driver run KEY=VALUE ...: params on the command line (powercut run --cmd takes no --param)
		raw := map[string]any{}
		b, _ := json.Marshal(p)
		json.Unmarshal(b, &raw)
		for _, kv := range os.Args[2:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				fatalf("run: %q is not KEY=VALUE", kv)
			}
			raw[k] = v
		}
		if p, err = parseParams(raw); err != nil {
			fatalf("%v", err)
		}
	}
	startMarks()
	etcd, err := etcdBinary()
	if err != nil {
		fatalf("%v", err)
	}
	mounts := nodeMounts(".")
	if len(mounts) < 3 {
		fatalf("needs a 3-node cluster recording (--nodes 3: mounts n0, n1, n2 in the cwd), found %v", mounts)
	}
	mounts = mounts[:3]
	var dirs []string
	for _, m := range mounts {
		dirs = append(dirs, filepath.Join(m, dataDir))
	}
	logs, err := os.MkdirTemp("", "etcd-defrag-")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(logs)
	quietLogs()
	c := newCluster(etcd, dirs, logs, p)
	t0 := time.Now()
	code := 0
	func() {
		defer c.stop(3*time.Second, syscall.SIGTERM)
		mark("begin", upKey)
		if err := c.start(); err != nil {
			fatalf("%v", err)
		}
		if !c.waitReady(time.Duration(p.StartTimeout * float64(time.Second))) {
			fmt.Fprintf(os.Stderr, "etcd-defrag: no healthy cluster within %gs: %s\n", p.StartTimeout, failures(c))
			code = 1
			return
		}
		syscall.Sync() // the bootstrap on disk, as on a cluster up for longer than the writeback delay
		mark("ack", upKey)
		t1 := time.Now()
		fmt.Fprintf(os.Stderr, "etcd-defrag: %d members healthy in %.1fs\n", len(c.members), t1.Sub(t0).Seconds())

		var eps []string
		for _, m := range c.members {
			eps = append(eps, m.clientURL())
		}
		cli, err := client(eps)
		if err != nil {
			fmt.Fprintf(os.Stderr, "etcd-defrag: client: %v\n", err)
			code = 1
			return
		}
		defer cli.Close()

		// the defragmenting client: Maintenance.Defragment on each member in turn, periodically
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var defrags, defragErrs int
		if p.DefragMs > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(time.Duration(p.DefragMs) * time.Millisecond)
				defer tick.Stop()
				for j := 0; ; j++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					m := c.members[j%len(c.members)]
					ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
					s := time.Now()
					_, err := cli.Defragment(ctx, m.clientURL())
					cancel()
					defrags++
					if err != nil {
						defragErrs++
						fmt.Fprintf(os.Stderr, "etcd-defrag: defragment %s: %v\n", m.name(), err)
					} else if defrags <= 3 {
						fmt.Fprintf(os.Stderr, "etcd-defrag: defragment %s took %.0f ms\n", m.name(), time.Since(s).Seconds()*1000)
					}
				}
			}()
		}

		// the writers: clients goroutines, client c commits i = c, c+clients, ...; commit i is
		// `group` puts (k<i>, or k<i>.0 .. k<i>.<group-1> issued concurrently), each a plain Put or
		// with txn=1 a Txn (put if the key is new); begin:i before, ack:i once every put returned
		var (
			failMu  sync.Mutex
			failMsg string
			acks    int
			sawTime []time.Duration
		)
		failed := func() bool { failMu.Lock(); defer failMu.Unlock(); return failMsg != "" }
		putOne := func(k, v string, deadline time.Time) error {
			for {
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				var err error
				if p.Txn != 0 {
					var r *clientv3.TxnResponse
					r, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(k), "=", 0)).
						Then(clientv3.OpPut(k, v)).Commit()
					if err == nil && !r.Succeeded {
						// a retried Txn whose first try was applied: the key is there; the value is checked
						err = nil
					}
				} else {
					_, err = cli.Put(ctx, k, v)
				}
				cancel()
				if err == nil {
					return nil
				}
				if time.Now().After(deadline) || failed() {
					return err
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		var writers sync.WaitGroup
		for w := 0; w < p.Clients; w++ {
			writers.Add(1)
			go func(w int) {
				defer writers.Done()
				for i := w; i < p.N && !failed(); i += p.Clients {
					mark("begin", strconv.Itoa(i))
					s := time.Now()
					deadline := s.Add(time.Duration(p.PutTimeout * float64(time.Second)))
					errs := make([]error, p.Group)
					var g sync.WaitGroup
					for j := 0; j < p.Group; j++ {
						g.Add(1)
						go func(j int) {
							defer g.Done()
							errs[j] = putOne(subKey(i, j, p.Group), subValue(p.Seed, i, j, p.Size, p.Group), deadline)
						}(j)
					}
					g.Wait()
					for j, err := range errs {
						if err != nil {
							failMu.Lock()
							if failMsg == "" {
								failMsg = fmt.Sprintf("put %s not answered within %gs: %v; %s", subKey(i, j, p.Group), p.PutTimeout, err, failures(c))
							}
							failMu.Unlock()
							return
						}
					}
					mark("ack", strconv.Itoa(i))
					failMu.Lock()
					acks++
					sawTime = append(sawTime, time.Since(s))
					failMu.Unlock()
				}
			}(w)
		}
		writers.Wait()
		close(stop)
		wg.Wait()
		if failMsg != "" {
			fmt.Fprintf(os.Stderr, "etcd-defrag: %s\n", failMsg)
			code = 1
			return
		}
		sort.Slice(sawTime, func(a, b int) bool { return sawTime[a] < sawTime[b] })
		med := time.Duration(0)
		if len(sawTime) > 0 {
			med = sawTime[len(sawTime)/2]
		}
		fmt.Fprintf(os.Stderr, "etcd-defrag: %d commits (%d puts each, %d clients, txn=%d) acked in %.1fs (median %.0f ms each), %d defragmentations (%d failed)\n",
			acks, p.Group, p.Clients, p.Txn, time.Since(t1).Seconds(), med.Seconds()*1000, defrags, defragErrs)
	}()
	os.Exit(code)
}

func failures(c *cluster) string {
	ex := c.exitedNow()
	if len(ex) == 0 {
		return "no member exited"
	}
	var out []string
	for i := range c.members {
		if rc, ok := ex[i]; ok {
			out = append(out, fmt.Sprintf("node %d: etcd exited %d: %s", i, rc, lastError(c.logPath(i))))
		}
	}
	return strings.Join(out, "; ")
}

// ---------------------------------------------------------------- check (the checker)

type checkInput struct {
	Mount  string         `json:"mount"`
	Mounts []string       `json:"mounts"`
	Acked  []string       `json:"acked"`
	Begun  []string       `json:"begun"`
	Params map[string]any `json:"params"`
	State  string         `json:"state"`
}

type result struct {
	Verdict string   `json:"verdict"`
	Reasons []string `json:"reasons"`
}

func say(r result) {
	if r.Reasons == nil {
		r.Reasons = []string{}
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

// check: the outer half runs the inner half in a network namespace of its own, with the same
// input, and passes its verdict on; a recovery that gives none is a verdict too (never a panic).
func check() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		say(result{"corrupt-data", []string{"checker: cannot read its input: " + err.Error()}})
		return
	}
	if os.Getenv(innerEnv) == "1" {
		say(checkInner(in))
		return
	}
	var ci checkInput
	if err := json.Unmarshal(in, &ci); err != nil {
		say(result{"corrupt-data", []string{"checker: bad input: " + err.Error()}})
		return
	}
	if !contains(ci.Acked, upKey) {
		say(result{"pass", []string{"the cut is before the cluster first came up (no ack:up): a bootstrap cut short promises nothing, etcd not started"}})
		return
	}
	// the params: $POWERCUT_PARAMS, then the input's, then `driver check KEY=VALUE ...` (a manual
	// `powercut run --cmd` passes no --param: the run and the checker get them on their command
	// lines); the inner half gets them merged in its input
	merged := map[string]any{}
	if s := strings.TrimSpace(os.Getenv("POWERCUT_PARAMS")); s != "" {
		json.Unmarshal([]byte(s), &merged)
	}
	for k, v := range ci.Params {
		merged[k] = v
	}
	for _, kv := range os.Args[2:] {
		if k, v, ok := strings.Cut(kv, "="); ok {
			merged[k] = v
		}
	}
	p, err := parseParams(merged)
	if err != nil {
		say(result{"corrupt-data", []string{"checker: " + err.Error()}})
		return
	}
	var whole map[string]any
	if json.Unmarshal(in, &whole) == nil {
		whole["params"] = merged
		if b, err := json.Marshal(whole); err == nil {
			in = b
		}
	}
	self, err := os.Executable()
	if err != nil {
		say(result{"corrupt-data", []string{"checker: " + err.Error()}})
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		say(result{"corrupt-data", []string{"checker: needs unshare (util-linux) for a network namespace per state"}})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration((p.RecoverTimeout+60)*float64(time.Second)))
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare, "--net", "--", self, "check")
	cmd.Env = append(os.Environ(), innerEnv+"=1")
	cmd.Stdin = bytes.NewReader(in)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runErr := cmd.Run()
	var last string
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			last = t
		}
	}
	var r result
	if last == "" || json.Unmarshal([]byte(last), &r) != nil || r.Verdict == "" {
		say(result{"corrupt-data", []string{fmt.Sprintf("checker: the recovery gave no verdict (%v)", runErr)}})
		return
	}
	say(r)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// loUp brings lo up (a fresh network namespace has it down).
func loUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr [40]byte
	copy(ifr[:], "lo")
	ioctl := func(req uintptr) error {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
			return e
		}
		return nil
	}
	if err := ioctl(syscall.SIOCGIFFLAGS); err != nil {
		return err
	}
	flags := *(*uint16)(unsafe.Pointer(&ifr[16]))
	*(*uint16)(unsafe.Pointer(&ifr[16])) = flags | syscall.IFF_UP
	return ioctl(syscall.SIOCSIFFLAGS)
}

type view struct {
	rev     int64
	kvs     map[string]string
	mods    map[string]int64 // key -> mod_revision
	vers    map[string]int64 // key -> version
	healthy bool
	err     string
}

// waitMajority: every member healthy -- or, once a majority is, a grace for the rest; false if no
// majority within the timeout or a member exited (then the caller names it).
func (c *cluster) waitMajority(timeout, grace time.Duration) (healthyNow []bool, ok bool) {
	deadline := time.Now().Add(timeout)
	majorityAt := time.Time{}
	for {
		if len(c.exitedNow()) > 0 {
			return nil, false
		}
		hs := make([]bool, len(c.members))
		n := 0
		for i, m := range c.members {
			if hs[i] = healthy(m.clientURL()); hs[i] {
				n++
			}
		}
		if n == len(c.members) {
			return hs, true
		}
		if n > len(c.members)/2 && majorityAt.IsZero() {
			majorityAt = time.Now()
		}
		now := time.Now()
		if !majorityAt.IsZero() && now.Sub(majorityAt) > grace {
			return hs, true
		}
		if now.After(deadline) {
			return hs, n > len(c.members)/2
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func checkInner(in []byte) result {
	var ci checkInput
	if err := json.Unmarshal(in, &ci); err != nil {
		return result{"corrupt-data", []string{"checker: bad input: " + err.Error()}}
	}
	p, err := parseParams(ci.Params)
	if err != nil {
		return result{"corrupt-data", []string{"checker: " + err.Error()}}
	}
	if err := loUp(); err != nil {
		return result{"corrupt-data", []string{"checker: cannot bring lo up: " + err.Error()}}
	}
	etcd, err := etcdBinary()
	if err != nil {
		return result{"corrupt-data", []string{"checker: " + err.Error()}}
	}
	mounts := ci.Mounts
	if len(mounts) == 0 {
		mounts = []string{ci.Mount}
	}
	var dirs []string
	for _, m := range mounts {
		dirs = append(dirs, filepath.Join(m, dataDir))
	}
	logs := os.Getenv("ETCD_DEFRAG_LOGS") // kept for debugging when set
	if logs == "" {
		if logs, err = os.MkdirTemp("", "etcd-defrag-check-"); err != nil {
			return result{"corrupt-data", []string{"checker: " + err.Error()}}
		}
		defer os.RemoveAll(logs)
	} else if err := os.MkdirAll(logs, 0o755); err != nil {
		return result{"corrupt-data", []string{"checker: " + err.Error()}}
	}
	quietLogs()
	c := newCluster(etcd, dirs, logs, p)
	if err := c.start(); err != nil {
		return result{"corrupt-data", []string{"checker: " + err.Error()}}
	}
	defer c.stop(0, syscall.SIGKILL) // read already; the images are throwaway clones
	timeout := time.Duration(p.RecoverTimeout * float64(time.Second))
	t0 := time.Now()
	hs, ok := c.waitMajority(timeout, 8*time.Second)
	if !ok {
		time.Sleep(300 * time.Millisecond) // let a dying member finish its log
		if len(c.exitedNow()) > 0 {
			return result{"corrupt-data", []string{"etcd refused to restart: " + failures(c)}}
		}
		var st []string
		for i := range c.members {
			st = append(st, fmt.Sprintf("node %d: %s", i, lastError(c.logPath(i))))
		}
		return result{"corrupt-data", []string{fmt.Sprintf("no healthy majority within %gs after restart: %s", p.RecoverTimeout, strings.Join(st, "; "))}}
	}
	fmt.Fprintf(os.Stderr, "etcd-defrag check %s: healthy %v in %.1fs\n", ci.State, hs, time.Since(t0).Seconds())

	views := make([]view, len(c.members))
	for i, m := range c.members {
		views[i] = readMember(m.clientURL(), hs[i])
	}
	r := judge(ci, p, views)
	if len(c.exitedNow()) > 0 { // a member died while being read
		r = result{"corrupt-data", append([]string{"etcd member exited after restart: " + failures(c)}, r.Reasons...)}
	}
	for i, h := range hs {
		if !h {
			r.Reasons = append(r.Reasons, fmt.Sprintf("note: node %d had no leader it agreed with after %.0fs: %s", i, time.Since(t0).Seconds(), lastError(c.logPath(i))))
		}
	}
	return r
}

// readMember: a healthy member first answers a linearizable read (it catches up with the leader's
// commit index); then what the member itself holds: a serializable read (its own revision, keys,
// mod_revisions). A member without a leader answers the serializable read alone.
func readMember(url string, healthy bool) view {
	v := view{kvs: map[string]string{}, mods: map[string]int64{}, vers: map[string]int64{}, healthy: healthy}
	cli, err := client([]string{url})
	if err != nil {
		v.err = err.Error()
		return v
	}
	defer cli.Close()
	wait := 15 * time.Second
	if !healthy {
		wait = 3 * time.Second // no leader: it answers at once or not at all
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if healthy {
		if _, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly()); err != nil {
			v.err = "linearizable read: " + err.Error()
			return v
		}
	}
	r, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithSerializable())
	if err != nil {
		v.err = "serializable read: " + err.Error()
		return v
	}
	v.rev = r.Header.Revision
	for _, kv := range r.Kvs {
		v.kvs[string(kv.Key)] = string(kv.Value)
		v.mods[string(kv.Key)] = kv.ModRevision
		v.vers[string(kv.Key)] = kv.Version
	}
	return v
}

func hashKV(url string, rev int64) (uint32, error) {
	cli, err := client([]string{url})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r, err := cli.HashKV(ctx, url, rev)
	if err != nil {
		return 0, err
	}
	return r.Hash, nil
}

func short(s string) string {
	if len(s) > 16 {
		return fmt.Sprintf("%q... (%d bytes)", s[:16], len(s))
	}
	return fmt.Sprintf("%q (%d bytes)", s, len(s))
}

// keyIndex: the commit i of key k<i> or k<i>.<j>; -1 for any other key.
func keyIndex(k string) int {
	i, _, ok := parseKey(k)
	if !ok {
		return -1
	}
	return i
}

// parseKey: k<i> -> (i, -1); k<i>.<j> -> (i, j).
func parseKey(k string) (i, j int, ok bool) {
	if !strings.HasPrefix(k, "k") {
		return -1, -1, false
	}
	head, tail, dotted := strings.Cut(k[1:], ".")
	i, err := strconv.Atoi(head)
	if err != nil || i < 0 {
		return -1, -1, false
	}
	if !dotted {
		return i, -1, true
	}
	j, err = strconv.Atoi(tail)
	if err != nil || j < 0 {
		return -1, -1, false
	}
	return i, j, true
}

// keyLess orders keys by commit, then by put within it.
func keyLess(a, b string) bool {
	ia, ja, _ := parseKey(a)
	ib, jb, _ := parseKey(b)
	if ia != ib {
		return ia < ib
	}
	return ja < jb
}

// judge: (a) every acked put on every member with its value, no key never put; (b) the members
// agree: at the revision all of them reached (HashKV there), and on every key all of them hold
// (mod_revision, version). A member further on holds, beyond that common revision, one revision per
// put the others lack -- a put of the last instant that reached it alone (never acked) -- and
// nothing else: a put applied twice (an entry re-applied) shifts its revisions and breaks this.
func judge(ci checkInput, p params, views []view) result {
	var corrupt, lost []string
	acked := map[int]bool{}
	known := map[int]bool{}
	for _, k := range ci.Acked {
		if i, err := strconv.Atoi(k); err == nil {
			acked[i] = true
			known[i] = true
		}
	}
	for _, k := range ci.Begun {
		if i, err := strconv.Atoi(k); err == nil {
			known[i] = true
		}
	}
	var ackedSorted []int
	for i := range acked {
		ackedSorted = append(ackedSorted, i)
	}
	sort.Ints(ackedSorted)
	var notes []string
	var serving []view
	var nodeOf []int
	for n, v := range views {
		if v.err != "" {
			if v.healthy {
				corrupt = append(corrupt, fmt.Sprintf("node %d: %s", n, v.err))
			} else { // running, no leader it agrees with, serves nothing: the majority is judged
				notes = append(notes, fmt.Sprintf("node %d never became healthy and serves nothing (%s)", n, v.err))
			}
			continue
		}
		serving = append(serving, v)
		nodeOf = append(nodeOf, n)
		var keys []string
		for k := range v.kvs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var phantom, wrong []string
		for _, k := range keys {
			i, j, ok := parseKey(k)
			if !ok || !known[i] || (p.Group <= 1) != (j < 0) || j >= p.Group || subKey(i, j, p.Group) != k {
				phantom = append(phantom, fmt.Sprintf("%q", k))
			} else if want := subValue(p.Seed, i, j, p.Size, p.Group); v.kvs[k] != want {
				wrong = append(wrong, fmt.Sprintf("key %s holds %s, not the value put %s", k, short(v.kvs[k]), short(want)))
			}
		}
		if len(wrong) > 0 {
			corrupt = append(corrupt, fmt.Sprintf("node %d: %s (%d keys with a wrong value)", n, wrong[0], len(wrong)))
		}
		if len(phantom) > 0 {
			corrupt = append(corrupt, fmt.Sprintf("node %d: key %s was never put (%d such keys; %d keys begun)", n, phantom[0], len(phantom), len(known)))
		}
		var missing []string
		for _, i := range ackedSorted {
			for j := 0; j < p.Group; j++ {
				if _, ok := v.kvs[subKey(i, j, p.Group)]; !ok {
					missing = append(missing, subKey(i, j, p.Group))
				}
			}
		}
		if len(missing) > 0 {
			more := ""
			if len(missing) > 10 {
				more = ", ..."
				missing = missing[:10]
			}
			lost = append(lost, fmt.Sprintf("node %d: acked key %s is missing: it serves %d keys, %d were acked (missing: %s%s)",
				n, missing[0], len(v.kvs), len(acked)*p.Group, strings.Join(missing, ", "), more))
		}
	}
	// (b) the members agree
	minRev := int64(-1)
	views = serving
	if len(corrupt) == 0 && len(views) > 1 {
		revs := make([]string, len(views))
		for n, v := range views {
			revs[n] = fmt.Sprintf("node %d at revision %d", nodeOf[n], v.rev)
			if minRev < 0 || v.rev < minRev {
				minRev = v.rev
			}
		}
		revLine := strings.Join(revs, ", ")
		all := map[string]bool{}
		for _, v := range views {
			for k := range v.kvs {
				all[k] = true
			}
		}
		var keys []string
		for k := range all {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool { return keyLess(keys[a], keys[b]) })
		// every key all members hold: the same mod_revision and version
		diffs, first := 0, ""
		for _, k := range keys {
			common := true
			for _, v := range views {
				if _, ok := v.mods[k]; !ok {
					common = false
				}
			}
			if !common {
				continue
			}
			differ := false
			var parts []string
			for n, v := range views {
				parts = append(parts, fmt.Sprintf("%d (version %d) on node %d", v.mods[k], v.vers[k], nodeOf[n]))
				if v.mods[k] != views[0].mods[k] || v.vers[k] != views[0].vers[k] {
					differ = true
				}
			}
			if differ {
				diffs++
				if first == "" {
					first = fmt.Sprintf("%s has mod_revision %s", k, strings.Join(parts, ", "))
				}
			}
		}
		if diffs > 0 {
			corrupt = append(corrupt, fmt.Sprintf("members disagree on the revision after restart: %s; %d keys they all hold differ: %s%s", revLine, diffs, first, skipped(views, nodeOf, keys)))
		}
		// beyond the common revision: one revision per put the others lack, none acked
		for n, v := range views {
			if v.rev == minRev {
				continue
			}
			var extra []string
			revsSeen := map[int64]bool{}
			bad := ""
			for _, k := range keys {
				mr, ok := v.mods[k]
				if !ok || mr <= minRev {
					continue
				}
				revsSeen[mr] = true
				extra = append(extra, k)
				for m, o := range views {
					if o.rev == minRev {
						if _, has := o.mods[k]; has && bad == "" {
							bad = fmt.Sprintf("%s, put again at revision %d on node %d, is at %d on node %d", k, mr, nodeOf[n], o.mods[k], nodeOf[m])
						}
					}
				}
				if i := keyIndex(k); acked[i] && bad == "" {
					for m, o := range views {
						if _, has := o.mods[k]; !has {
							bad = fmt.Sprintf("acked %s is on node %d, not on node %d", k, nodeOf[n], nodeOf[m])
						}
					}
				}
			}
			if int64(len(revsSeen)) != v.rev-minRev && bad == "" {
				bad = fmt.Sprintf("node %d is %d revisions ahead of the common revision %d with %d puts the others lack (%s)", nodeOf[n], v.rev-minRev, minRev, len(revsSeen), strings.Join(extra, ", "))
			}
			if bad != "" && diffs == 0 {
				corrupt = append(corrupt, fmt.Sprintf("members disagree on the revision after restart: %s; %s", revLine, bad))
			}
		}
		// HashKV at the common revision
		var hs []string
		hsame := true
		var h0 uint32
		for n := range views {
			url := fmt.Sprintf("http://127.0.0.1:%d", p.Port+2*nodeOf[n])
			h, err := hashKV(url, minRev)
			if err != nil {
				hs = append(hs, fmt.Sprintf("node %d: HashKV failed: %v", nodeOf[n], err))
				hsame = false
				continue
			}
			if n == 0 {
				h0 = h
			} else if h != h0 {
				hsame = false
			}
			hs = append(hs, fmt.Sprintf("node %d %08x", nodeOf[n], h))
		}
		if !hsame {
			corrupt = append(corrupt, fmt.Sprintf("members disagree on HashKV at the common revision %d (%s): %s", minRev, revLine, strings.Join(hs, ", ")))
		}
	}
	if len(corrupt) > 0 {
		return result{"corrupt-data", append(append(corrupt, lost...), notes...)}
	}
	if len(lost) > 0 {
		return result{"lost-ack", append(lost, notes...)}
	}
	out := []string{fmt.Sprintf("%d acked keys on every member; members agree at revision %d", len(acked), minRev)}
	for n, v := range views {
		if v.rev != minRev {
			out = append(out, fmt.Sprintf("node %d is at revision %d: ahead by puts never acked that the others lack", nodeOf[n], v.rev))
		}
	}
	return result{"pass", append(out, notes...)}
}

// skipped names a put one member lacks although it holds a put the others made after it (a
// committed entry it never applied): "; node 1 lacks k5.2 (mod_revision 32 on node 0) but holds
// k6.0, put after it (mod_revision 33 on node 0)"; "" when none.
func skipped(views []view, nodeOf []int, keys []string) string {
	for n, v := range views {
		for o, w := range views {
			if o == n {
				continue
			}
			for _, k := range keys {
				mk, ok := w.mods[k]
				if _, has := v.mods[k]; !ok || has {
					continue
				}
				for _, l := range keys {
					if ml, both := w.mods[l]; both && ml > mk {
						if _, has := v.mods[l]; has {
							return fmt.Sprintf("; node %d lacks %s (mod_revision %d on node %d) but holds %s, put after it (mod_revision %d on node %d)",
								nodeOf[n], k, mk, nodeOf[o], l, ml, nodeOf[o])
						}
					}
				}
			}
		}
	}
	return ""
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: driver run | driver check")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "run":
		run()
	case "check":
		check()
	default:
		fmt.Fprintln(os.Stderr, "usage: driver run | driver check")
		os.Exit(2)
	}
}
