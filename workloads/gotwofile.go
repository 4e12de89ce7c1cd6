// gotwofile: twofile's store (workloads/twofile.py, log_via=pwrite) as a static Go program, whose
// syncs are raw system calls that no libc shim sees (workloads/gotwofile.py runs it; docs/races.md).
//
//	gotwofile -records FILE -reply-on both|index
//
// FILE holds the n records, one 4 KiB block each, as twofile writes them (the Python side writes
// it outside the recorded filesystem).  In the working directory: store.log (n blocks) and
// store.idx preallocated and fsynced with the directory; then per commit i: `powercut-mark
// begin:i`, record i into block i of store.log, its index entry into store.idx, then
// fdatasync(store.log) and fsync(store.idx), each in a goroutine of its own, in that order;
// reply_on=both marks ack:i once both returned, reply_on=index as soon as the index's did (the
// bug), then waits for the log's.  Exit 0, or 1 with one line on stderr (a failed call or mark).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

const (
	block = 4096 // bytes per record in store.log
	entry = 64   // index bytes per record
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gotwofile: "+format+"\n", args...)
	os.Exit(1)
}

// mark runs `powercut-mark text` (the first on PATH); a failed mark is a failed workload.
func mark(text string) {
	cmd := exec.Command("powercut-mark", text)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fail("powercut-mark %s: %v", text, err)
	}
}

func open(name string) int {
	fd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		fail("open %s: %v", name, err)
	}
	return fd
}

// pwrite writes all of b at off (one call for a block; a short write is an error).
func pwrite(fd int, name string, b []byte, off int64) {
	n, err := syscall.Pwrite(fd, b, off)
	if err != nil {
		fail("pwrite %s at %d: %v", name, off, err)
	}
	if n != len(b) {
		fail("pwrite %s at %d: wrote %d of %d bytes", name, off, n, len(b))
	}
}

// inGoroutine runs sync(fd) in a goroutine of its own (its own OS thread while the call blocks) and
// returns once the goroutine runs, as Python's Thread.start() returns once its thread does: the
// goroutine is then about to make the call, never still queued behind the other sync (on one P the
// runtime would run the second goroutine only after the first one's call).  The channel gets the
// call's error.
func inGoroutine(sync func(int) error, fd int) chan error {
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(started)
		done <- sync(fd)
	}()
	<-started
	return done
}

func joined(done chan error, what string) {
	if err := <-done; err != nil {
		fail("%s: %v", what, err)
	}
}

func main() {
	records := flag.String("records", "", "the file of the n records, 4096 bytes each")
	replyOn := flag.String("reply-on", "both", "both: ack once both syncs returned; index: once the index's did")
	flag.Parse()
	if *records == "" || flag.NArg() != 0 || (*replyOn != "both" && *replyOn != "index") {
		fail("usage: gotwofile -records FILE -reply-on both|index")
	}
	data, err := os.ReadFile(*records)
	if err != nil {
		fail("%v", err)
	}
	if len(data) == 0 || len(data)%block != 0 {
		fail("%s: %d bytes, not a positive multiple of %d", *records, len(data), block)
	}
	n := len(data) / block

	log := open("store.log")
	idx := open("store.idx")
	pwrite(log, "store.log", make([]byte, block*n), 0) // allocated before the first commit: overwrites only
	idxSize := entry * n
	if idxSize < block {
		idxSize = block
	}
	pwrite(idx, "store.idx", make([]byte, idxSize), 0)
	if err := syscall.Fsync(log); err != nil {
		fail("fsync store.log: %v", err)
	}
	if err := syscall.Fsync(idx); err != nil {
		fail("fsync store.idx: %v", err)
	}
	dir, err := syscall.Open(".", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		fail("open .: %v", err)
	}
	if err := syscall.Fsync(dir); err != nil {
		fail("fsync .: %v", err)
	}
	syscall.Close(dir)

	for i := 0; i < n; i++ {
		mark(fmt.Sprintf("begin:%d", i))
		pwrite(log, "store.log", data[i*block:(i+1)*block], int64(i*block))
		ent := fmt.Sprintf("%d %d", i, i*block)
		pwrite(idx, "store.idx", []byte(ent+strings.Repeat(" ", entry-len(ent))), int64(i*entry))
		logSync := inGoroutine(syscall.Fdatasync, log)
		idxSync := inGoroutine(syscall.Fsync, idx)
		joined(idxSync, "fsync store.idx")
		if *replyOn == "index" {
			mark(fmt.Sprintf("ack:%d", i)) // the bug: the log's sync may still be running
			joined(logSync, "fdatasync store.log")
		} else {
			joined(logSync, "fdatasync store.log")
			mark(fmt.Sprintf("ack:%d", i))
		}
	}
	syscall.Close(log)
	syscall.Close(idx)
}
