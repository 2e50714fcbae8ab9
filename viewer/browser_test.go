package viewer

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/viewer/flame"
	"github.com/xpu-timer/xpu-timer/viewer/svg"
)

func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	privileged.Skip(t, "chromium is not installed (apt-get install chromium)")
	return ""
}

// matchedShare is what the picture's search should report for re: the
// weight of the folded stacks with a frame matching it, over all weight.
func matchedShare(t *testing.T, folded string, re *regexp.Regexp) float64 {
	data, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	var total, hit float64
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		w, _ := strconv.ParseFloat(line[i+1:], 64)
		total += w
		for _, fr := range strings.Split(line[:i], ";") {
			if re.MatchString(fr) {
				hit += w
				break
			}
		}
	}
	return 100 * hit / total
}

// hostileDir is the nccl-stall fixture plus frames whose names try to break
// the SVG or run script.
func hostileDir(t *testing.T) string {
	dir := copyDir(t, "nccl-stall")
	f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(0, world)))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{`</title><script>window.pwned=1</script>`, `"><g onload="window.pwned=2">`, "]]><script>window.pwned=3</script>",
		`operator<<(std::ostream&, 'x')`, "ctl\x01\x1b[31m", "日本語 ünïcödé", "bad\xffutf8;semi"}
	var frames []stack.Frame
	for _, n := range names {
		frames = append(frames, stack.Frame{Func: n, Module: "/lib/" + n + ".so"})
	}
	f.Threads = append(f.Threads, stack.Thread{TID: 99, Name: "<evil>", Native: frames})
	if _, err := dumpfile.Write(dir, f); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBrowser loads each picture in headless Chromium, drives search, hover,
// zoom and reset with real input events, checks the outcome, and takes a
// screenshot (kept in $XPU_TIMER_SCREENSHOTS when set).
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	dir := hostileDir(t)
	out := t.TempDir()
	if _, err := Run(Options{Dir: dir, Out: out}); err != nil {
		t.Fatal(err)
	}
	b := startBrowser(t, bin)
	for _, tc := range []struct {
		svg, folded string
		search      string // regex for search
		zoom        string // regex picking the frame to click
	}{
		{timeline.CppSVG, timeline.CppFolded, "nccl_wait_peers", "^ncclDevKernel_Generic@"},
		{timeline.PySVG, timeline.PyFolded, `run\.py:2\d\d`, "^train@"},
		{timeline.MixedSVG, timeline.MixedFolded, "nccl", "^ncclDevKernel_Generic@"},
	} {
		t.Run(tc.svg, func(t *testing.T) {
			path := filepath.Join(out, tc.svg)
			s, err := b.open("file://"+path, 1700, 900)
			if err != nil {
				t.Fatal(err)
			}
			var pwned string
			if err := b.eval(s, `String(window.pwned) + "/" + document.querySelectorAll("script").length + "/" + document.documentElement.localName`, &pwned); err != nil {
				t.Fatal(err)
			}
			if pwned != "undefined/1/svg" {
				t.Errorf("injected markup ran or the document is no SVG: %s", pwned)
			}

			// Search, as the Search button and Ctrl-F do.
			var share float64
			if err := b.eval(s, fmt.Sprintf("search(%q)", tc.search), &share); err != nil {
				t.Fatal(err)
			}
			want := matchedShare(t, filepath.Join(out, tc.folded), regexp.MustCompile(tc.search))
			if math.Abs(share-want) > 0.01 || want == 0 {
				t.Errorf("search %q matched %.3f%%, want %.3f%%", tc.search, share, want)
			}
			var text string
			b.eval(s, `document.getElementById("matched").textContent`, &text)
			if !strings.HasPrefix(text, fmt.Sprintf("Matched: %.1f%%", want)) {
				t.Errorf("matched text %q", text)
			}
			shot, err := b.screenshot(s)
			if err != nil {
				t.Fatal(err)
			}
			if len(shot) < 1000 || string(shot[1:4]) != "PNG" {
				t.Fatalf("screenshot is no PNG (%d bytes)", len(shot))
			}
			keep(t, tc.svg+".search.png", shot)

			// Find the frame to zoom into and click it with the mouse.
			var box struct {
				X, Y, W, H float64
				Label      string
				Hidden     int
			}
			find := fmt.Sprintf(`(function(){
				var re = new RegExp(%q);
				var g = Array.from(document.querySelectorAll("#frames g.f")).find(function(g){ return re.test(label(g)); });
				if (!g) return null;
				g.id = "target";
				var r = g.querySelector("rect").getBoundingClientRect();
				return {X: r.x + r.width/2, Y: r.y + r.height/2, W: r.width, H: r.height, Label: label(g),
					Hidden: document.querySelectorAll("g.f.hide").length};
			})()`, tc.zoom)
			if err := b.eval(s, find, &box); err != nil || box.W == 0 {
				t.Fatalf("no frame matches %q: %v", tc.zoom, err)
			}
			// Hover shows the frame's details.
			if err := b.mouse(s, "mouseMoved", box.X, box.Y); err != nil {
				t.Fatal(err)
			}
			b.eval(s, `document.getElementById("details").textContent`, &text)
			if !strings.HasPrefix(text, box.Label+" (") {
				t.Errorf("hover details %q, want the label %q", text, box.Label)
			}
			if err := b.click(s, box.X, box.Y); err != nil {
				t.Fatal(err)
			}
			var after struct {
				W, Full float64
				Hidden  int
				Unzoom  bool
				Matched string
			}
			state := `(function(){ return {W: document.querySelector("#target rect").getBoundingClientRect().width,
				Full: WIDTH - 2 * XPAD,
				Hidden: document.querySelectorAll("g.f.hide").length,
				Unzoom: !document.getElementById("unzoom").classList.contains("hide"),
				Matched: document.getElementById("matched").textContent}; })()`
			if err := b.eval(s, state, &after); err != nil {
				t.Fatal(err)
			}
			if math.Abs(after.W-after.Full) > 1 || after.Full < svg.DefaultWidth-20 || after.Hidden == 0 || !after.Unzoom {
				t.Errorf("after clicking %q (%.1f px wide): %+v, want it the picture's width, others hidden, Reset Zoom shown", box.Label, box.W, after)
			}
			if after.Matched != text && !strings.HasPrefix(after.Matched, "Matched: ") {
				t.Errorf("search lost on zoom: %q", after.Matched)
			}
			shot, _ = b.screenshot(s)
			keep(t, tc.svg+".zoom.png", shot)

			// Reset Zoom restores every frame.
			var reset struct{ X, Y float64 }
			b.eval(s, `(function(){ var r = document.getElementById("unzoom").getBoundingClientRect(); return {X: r.x + r.width/2, Y: r.y + r.height/2}; })()`, &reset)
			if err := b.click(s, reset.X, reset.Y); err != nil {
				t.Fatal(err)
			}
			if err := b.eval(s, state, &after); err != nil {
				t.Fatal(err)
			}
			if math.Abs(after.W-box.W) > 0.05 || after.Hidden != 0 || after.Unzoom {
				t.Errorf("after Reset Zoom: %+v, want %.2f px wide and nothing hidden", after, box.W)
			}
			// Escape clears the search.
			b.call(s, "Input.dispatchKeyEvent", map[string]any{"type": "keyDown", "key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27})
			b.eval(s, `document.getElementById("matched").textContent + "|" + document.querySelectorAll("g.f.match").length`, &text)
			if text != "|0" {
				t.Errorf("after Escape: %q", text)
			}
		})
	}
}

// keep saves a screenshot into $XPU_TIMER_SCREENSHOTS, if set.
func keep(t *testing.T, name string, png []byte) {
	dir := os.Getenv("XPU_TIMER_SCREENSHOTS")
	if dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Error(err)
	}
}

// TestBrowserRankSets opens the pictures of a real hang (rank 2 of 4
// sleeping in Python) at the default width and widths, as a person sees
// them, and reads the page: the faulty rank's frame shows its rank sets
// without hovering, the text fits its bar, and every label the page draws
// is what svg.Fit draws (so zooming, done by the script, shortens labels
// the same way).
func TestBrowserRankSets(t *testing.T) {
	bin := chromium(t)
	out := t.TempDir()
	if _, err := Run(Options{Dir: filepath.Join("testdata", "torchjob", "sleep"), Out: out, Weight: flame.Ranks}); err != nil {
		t.Fatal(err)
	}
	b := startBrowser(t, bin)
	for _, name := range []string{timeline.PySVG, timeline.MixedSVG} {
		t.Run(name, func(t *testing.T) {
			s, err := b.open("file://"+filepath.Join(out, name), 1700, 1000) // the picture may be wider: a person scrolls
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Text        string
				Bar, Drawn  float64
				Width       float64
				Mismatch    []string
				Frames      int
				ZoomedLabel string
			}
			page := `(function(){
				var frames = Array.from(document.querySelectorAll("#frames g.f"));
				var mismatch = [];
				frames.forEach(function(g){
					var w = +g.querySelector("rect").getAttribute("width");
					var drawn = g.querySelector("text").textContent;
					if (drawn !== fit(label(g), w)) mismatch.push(label(g) + " => " + drawn + " / " + fit(label(g), w));
				});
				var g = frames.find(function(g){ return /^stall_in_python_sleep@/.test(label(g)); });
				if (!g) return {Frames: frames.length, Mismatch: mismatch};
				var t = g.querySelector("text");
				var res = {Text: t.textContent, Bar: g.querySelector("rect").getBoundingClientRect().width,
					Drawn: t.getComputedTextLength(), Width: document.documentElement.getBoundingClientRect().width,
					Mismatch: mismatch, Frames: frames.length};
				zoom(g.parentNode.querySelector("g.f"));
				res.ZoomedLabel = t.textContent;
				return res;
			})()`
			if err := b.eval(s, page, &got); err != nil {
				t.Fatal(err)
			}
			if got.Text == "" {
				t.Fatalf("no stall_in_python_sleep frame among %d", got.Frames)
			}
			if got.Width < svg.DefaultWidth {
				t.Errorf("picture %.0f px wide, want at least %d", got.Width, svg.DefaultWidth)
			}
			if !strings.HasPrefix(got.Text, "stall_in_py") || !strings.HasSuffix(got.Text, "@2|0-1/3") {
				t.Errorf("rank 2's frame reads %q: want the function and its rank sets, 2|0-1/3", got.Text)
			}
			if got.Drawn > got.Bar {
				t.Errorf("label %q is %.0f px, wider than its %.0f px bar", got.Text, got.Drawn, got.Bar)
			}
			// With widths by rank, rank 2's bar is one unit, at least 160 px.
			if got.Bar < 159.9 {
				t.Errorf("rank 2's bar is %.1f px, want at least 160", got.Bar)
			}
			if len(got.Mismatch) > 0 {
				t.Errorf("the page's labels differ from svg.Fit's: %q", got.Mismatch)
			}
			if !strings.HasSuffix(got.ZoomedLabel, "@2|0-1/3") {
				t.Errorf("after a zoom the frame reads %q", got.ZoomedLabel)
			}
			shot, _ := b.screenshot(s)
			keep(t, "ranks."+name+".png", shot)
		})
	}
}

// TestBrowserShortSets opens the picture of the real H100 hang replicated
// to 64 ranks, where every 4th rank's frames carry rank sets of 16 runs:
// the page draws them shortened (2/6/…/30+8) exactly as svg.Fit does, and
// a zoom keeps the shortened sets.
func TestBrowserShortSets(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	replicate(t, realGloo, dir, 64)
	out := filepath.Join(dir, "out")
	if _, err := Run(Options{Dir: dir, Out: out, Weight: flame.Ranks}); err != nil {
		t.Fatal(err)
	}
	b := startBrowser(t, bin)
	s, err := b.open("file://"+filepath.Join(out, timeline.MixedSVG), 1700, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Short    []string
		Mismatch []string
		Zoomed   string
	}
	page := `(function(){
		var frames = Array.from(document.querySelectorAll("#frames g.f"));
		var res = {Short: [], Mismatch: []};
		frames.forEach(function(g){
			var w = +g.querySelector("rect").getAttribute("width");
			var drawn = g.querySelector("text").textContent;
			if (drawn !== fit(label(g), w)) res.Mismatch.push(label(g) + " => " + drawn + " / " + fit(label(g), w));
			if (/@2\/6\/10\/14\/18\/22\/26\/30\+8\|/.test(label(g))) res.Short.push(label(g));
		});
		var g = frames.find(function(g){ return /^cuStreamSynchronize@/.test(label(g)); });
		if (g) { zoom(g); res.Zoomed = g.querySelector("text").textContent; }
		return res;
	})()`
	if err := b.eval(s, page, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Short) == 0 {
		t.Error("no frame label carries the shortened set of every 4th rank from 2")
	}
	if len(got.Mismatch) > 0 {
		t.Errorf("the page's labels differ from svg.Fit's: %q", got.Mismatch)
	}
	if !strings.HasSuffix(got.Zoomed, "@2/6/10/14/18/22/26/30+8|0-1/3-5/7-9/11-13/15-17/19-21/23-25/27-29+25") {
		t.Errorf("after a zoom the kernel rank's frame reads %q", got.Zoomed)
	}
}
