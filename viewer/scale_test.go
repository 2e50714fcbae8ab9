package viewer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// realGloo is the real H100 hang (testdata/gpu/README.md): 4 ranks, rank
// 2 hung in a kernel while the others wait in gloo.
var realGloo = filepath.Join("testdata", "gpu", "h100-ddp-gloo-rank2-kernel")

// replicate writes the dumps of src (ranks 0..n-1 of a world of n) into
// dst as a job of world ranks: rank r is a copy of rank r mod n, so every
// n-th rank's stacks and decision differ from the others'.
func replicate(tb testing.TB, src, dst string, world int) {
	tb.Helper()
	paths, _, err := list(src)
	if err != nil {
		tb.Fatal(err)
	}
	var base []*dumpfile.File
	for _, p := range paths {
		l := decode(p, DefaultMaxFileSize)
		if l.err != nil {
			tb.Fatal(l.err)
		}
		base = append(base, l.file)
	}
	onEveryCPU(tb, world, func(r int) error {
		// The same process on another node: pid and thread ids kept.
		f := *base[r%len(base)]
		f.Rank, f.WorldSize = r, world
		f.LocalRank, f.LocalWorldSize, f.Host = r%8, 8, fmt.Sprintf("node-%05d", r/8)
		if f.Hang != nil {
			h := *f.Hang
			h.Rank = r
			f.Hang = &h
		}
		// Not dumpfile.Write: its two synced files a rank make the
		// writing take a minute, not what is measured.
		data, err := json.Marshal(&f)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, dumpfile.Name(r, world)), data, 0o644)
	})
}

// TestScale replicates the real H100 dumps to 16,384 ranks, every 4th
// hung in a kernel: the report names those 4,096 ranks in one finding,
// stays under 100 lines of bounded length, and the pictures' labels
// shorten long rank sets while the folded file keeps them whole.
func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 16,384 dumps (200 MB)")
	}
	const world = 16384
	dir := t.TempDir()
	replicate(t, realGloo, dir, world)
	out := filepath.Join(dir, "out")
	res, err := Run(Options{Dir: dir, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	var every4 []int
	for r := 2; r < world; r += 4 {
		every4 = append(every4, r)
	}
	if got := rankset.Fold(res.Report.Culprits); got != rankset.Fold(every4) {
		t.Errorf("culprits %s…, want every 4th rank from 2", rankset.Short(res.Report.Culprits, 4))
	}
	lines := strings.Split(strings.TrimSuffix(res.Summary, "\n"), "\n")
	if len(lines) >= 100 {
		t.Errorf("report of %d lines, want under 100:\n%s", len(lines), res.Summary)
	}
	for _, l := range lines {
		if len(l) > 1000 {
			t.Errorf("report line of %d bytes: %.200s…", len(l), l)
		}
	}
	for _, want := range []string{
		"Likely culprit: ranks 2/6/10/14/18/22/26/30+4088\n",
		"[kernel] each of ranks 2/6/10/14/18/22/26/30+4088 hangs in kernel at::cuda::(anonymous namespace)::spin_kernel (stream 0x0, not a collective), while ranks 0-1/3-5/7-9/11-13/15-17/19-21/23-25/27-29+12265 are not hung on GPU work and wait in gloo collective (4096 ranks) [a kernel outstanding 11s, past the 10s timeout]",
	} {
		if !strings.Contains(res.Summary, want) {
			t.Errorf("report lacks %q:\n%s", want, res.Summary)
		}
	}
	// The SVG: every label and its details are short.
	svg, err := os.ReadFile(filepath.Join(out, timeline.MixedSVG))
	if err != nil {
		t.Fatal(err)
	}
	tags := regexp.MustCompile(`(?s)<(title|text)[^>]*>(.*?)</(title|text)>`).FindAllSubmatch(svg, -1)
	if len(tags) == 0 {
		t.Fatal("no labels in the SVG")
	}
	short := false
	for _, m := range tags {
		if len(m[2]) > 1000 {
			t.Fatalf("SVG %s of %d bytes: %.200s…", m[1], len(m[2]), m[2])
		}
		short = short || bytes.Contains(m[2], []byte("@2/6/10/14/18/22/26/30+4088|"))
	}
	if !short {
		t.Error("no SVG label shows the culprits' rank set shortened")
	}
	// The folded file keeps the whole set.
	f, err := os.Open(filepath.Join(out, timeline.MixedFolded))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	whole := "@" + rankset.Fold(every4) + "|"
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() && !found {
		found = strings.Contains(sc.Text(), whole)
	}
	if !found {
		t.Errorf("no folded line holds the whole set of the 4,096 culprits (%d bytes)", len(whole))
	}
}
