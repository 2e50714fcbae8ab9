package ebpf

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// followedWords is the length of the map followed (probes.bpf.c,
// FOLLOWED_WORDS): a bit for every pid below PID_MAX_LIMIT (2^22).
const followedWords = 1 << 16

// followedSet is the map followed, mapped into our memory: bit pid%64 of
// word pid/64 is set while thread group pid is followed. The fork and
// exit programs change bits of the same words with BPF atomics, so Go
// changes them with atomic operations too, never by a map update. mu
// keeps close from unmapping the words under a change (Follow runs
// beside Close).
type followedSet struct {
	mu    sync.Mutex
	mem   []byte
	words []uint64 // nil once closed
}

func mapFollowed(m *ebpf.Map) (*followedSet, error) {
	if m.MaxEntries() != followedWords || m.ValueSize() != 8 {
		return nil, fmt.Errorf("map followed: %d entries of %d bytes, want %d of 8", m.MaxEntries(), m.ValueSize(), followedWords)
	}
	mem, err := unix.Mmap(m.FD(), 0, followedWords*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map followed: %w", err)
	}
	return &followedSet{mem: mem, words: unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), followedWords)}, nil
}

var errFollowedClosed = errors.New("tracer closed")

// word is the word and bit of pid; f.mu held.
func (f *followedSet) word(pid int) (*uint64, uint64, error) {
	if f.words == nil {
		return nil, 0, errFollowedClosed
	}
	if pid <= 0 || pid >= followedWords*64 {
		return nil, 0, fmt.Errorf("pid %d out of range (PID_MAX_LIMIT is %d)", pid, followedWords*64)
	}
	return &f.words[pid/64], 1 << (pid % 64), nil
}

// add follows thread group pid.
func (f *followedSet) add(pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, bit, err := f.word(pid)
	if err != nil {
		return err
	}
	atomic.OrUint64(w, bit)
	return nil
}

// remove stops following thread group pid.
func (f *followedSet) remove(pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w, bit, err := f.word(pid); err == nil {
		atomic.AndUint64(w, ^bit)
	}
}

// has reports whether thread group pid is followed (the kernel may have
// added it, at a fork, or removed it, at its exit).
func (f *followedSet) has(pid int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, bit, err := f.word(pid)
	return err == nil && atomic.LoadUint64(w)&bit != 0
}

func (f *followedSet) close() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mem == nil {
		return nil
	}
	err := unix.Munmap(f.mem)
	f.mem, f.words = nil, nil
	return err
}
