package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// StoreSegments returns the shared-memory segment names of the job whose
// XPU_FAKEGPU_STORE is store: the communicator named by the id rank 0
// wrote into the store.
func StoreSegments(store string) []string {
	raw, err := os.ReadFile(filepath.Join(store, "nccl_id"))
	if err != nil || len(strings.TrimSpace(string(raw))) < 32 {
		return nil
	}
	id := strings.TrimSpace(string(raw))[:32]
	return []string{ShmPrefix + "cu-" + id, ShmPrefix + "mc-" + id}
}

// RemoveSegments removes the named segments from /dev/shm, ignoring missing ones.
func RemoveSegments(names []string) {
	for _, n := range names {
		_ = os.Remove(filepath.Join("/dev/shm", n))
	}
}

// Segments lists the fake NCCL's segments currently in /dev/shm.
func Segments() ([]string, error) {
	m, err := filepath.Glob("/dev/shm/" + ShmPrefix + "*")
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m, nil
}
