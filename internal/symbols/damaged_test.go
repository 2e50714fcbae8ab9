package symbols

import (
	"debug/elf"
	"os"
	"runtime"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// maxDamagedAlloc bounds what reading a damaged variant of a 16 KB
// library may allocate: sizes read from it claim up to 2^60 bytes.
const maxDamagedAlloc = 1 << 20

// Every damaged variant of a small library names its function: from its
// DWARF's library when it is sound, else from .symtab, else from the
// dynamic segment; its call frame information is found; the damage is
// told; and what is read costs no more than the file holds.
func TestDamagedLibraries(t *testing.T) {
	_, variants := testutil.SpinLibraries(t, t.TempDir())
	good, err := elf.Open(variants[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := good.Symbols()
	var spin uint64
	for _, s := range syms {
		if s.Name == "spin" {
			spin = s.Value
		}
	}
	good.Close()
	if spin == 0 {
		t.Fatal("no spin in the library")
	}
	for _, v := range variants {
		t.Run(v.Name, func(t *testing.T) {
			fi, err := os.Stat(v.Path)
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			o, err := openObject(v.Path, fi.Size(), fileOpener(v.Path), true)
			if v.Damage == testutil.Unloadable {
				if err == nil {
					t.Fatal("opened a file ld.so refuses")
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			name, _, ok := o.symbolAt(spin + 2)
			file, line := o.line(spin + 2)
			_, fdeErr := o.FDE(spin + 2)
			damage := o.Damage()
			runtime.ReadMemStats(&after)
			t.Logf("%q at %s:%d; damage %q", name, file, line, damage)
			if name != "spin" || !ok {
				t.Errorf("named %q, %v; want spin", name, ok)
			}
			if fdeErr != nil {
				t.Errorf("no call frame information for spin: %v", fdeErr)
			}
			if (damage != "") != (v.Damage != testutil.Sound) {
				t.Errorf("damage %q", damage)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > maxDamagedAlloc {
				t.Errorf("%d bytes allocated, more than %d", n, maxDamagedAlloc)
			}
		})
	}
}
