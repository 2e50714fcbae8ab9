package viewer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// browser is headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: commands go in on fd 3, replies come out on fd
// 4, each a JSON object ended by a NUL byte).
type browser struct {
	cmd    *exec.Cmd
	in     *os.File // our end of fd 3
	out    *os.File // our end of fd 4
	r      *bufio.Reader
	id     int
	stderr *lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) < 1<<16 {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{in: cmdW, out: resR, r: bufio.NewReaderSize(resR, 1<<20), stderr: &lockedBuffer{}}
	b.cmd = exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdR, resW}
	b.cmd.Stderr = b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmdR.Close()
	resW.Close()
	t.Cleanup(func() {
		b.call("", "Browser.close", nil) // ends the browser politely; killed below if not
		done := make(chan struct{})
		go func() { b.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			b.cmd.Process.Kill()
			<-done
		}
		b.in.Close()
		b.out.Close()
	})
	return b
}

// call sends one command (to a page when session is set) and returns its
// result, skipping the events that arrive meanwhile.
func (b *browser) call(session, method string, params any) (json.RawMessage, error) {
	b.id++
	msg := map[string]any{"id": b.id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	b.in.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := b.in.Write(append(data, 0)); err != nil {
		return nil, fmt.Errorf("send %s: %w", method, err)
	}
	b.out.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		line, err := b.r.ReadBytes(0)
		if err != nil {
			return nil, fmt.Errorf("read reply to %s: %w (browser said: %s)", method, err, b.stderr)
		}
		var reply struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line[:len(line)-1], &reply); err != nil {
			return nil, fmt.Errorf("decode reply to %s: %w", method, err)
		}
		if reply.ID != b.id {
			continue // an event, or a late reply
		}
		if reply.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, reply.Error.Message)
		}
		return reply.Result, nil
	}
}

// open loads url in a new page and returns the page's session.
func (b *browser) open(url string, width, height int) (string, error) {
	res, err := b.call("", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err != nil {
		return "", err
	}
	var target struct{ TargetID string }
	json.Unmarshal(res, &target)
	res, err = b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		return "", err
	}
	var att struct{ SessionID string }
	json.Unmarshal(res, &att)
	s := att.SessionID
	if _, err := b.call(s, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}); err != nil {
		return "", err
	}
	if _, err := b.call(s, "Page.navigate", map[string]any{"url": url}); err != nil {
		return "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state string
		if err := b.eval(s, `document.readyState === "complete" && typeof search === "function" ? "ready" : document.readyState`, &state); err == nil && state == "ready" {
			return s, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("page %s did not load (state %q)", url, state)
		}
		time.Sleep(50 * time.Millisecond) // polling the page, not timing it
	}
}

// eval runs a JavaScript expression in the page and decodes its JSON-able
// value into v.
func (b *browser) eval(session, expr string, v any) error {
	res, err := b.call(session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("script threw: %s %s", r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	return json.Unmarshal(r.Result.Value, v)
}

// mouse sends a real mouse event at page coordinates.
func (b *browser) mouse(session, kind string, x, y float64) error {
	p := map[string]any{"type": kind, "x": x, "y": y, "button": "none"}
	if kind == "mousePressed" || kind == "mouseReleased" {
		p["button"] = "left"
		p["clickCount"] = 1
	}
	_, err := b.call(session, "Input.dispatchMouseEvent", p)
	return err
}

func (b *browser) click(session string, x, y float64) error {
	if err := b.mouse(session, "mouseMoved", x, y); err != nil {
		return err
	}
	if err := b.mouse(session, "mousePressed", x, y); err != nil {
		return err
	}
	return b.mouse(session, "mouseReleased", x, y)
}

func (b *browser) screenshot(session string) ([]byte, error) {
	res, err := b.call(session, "Page.captureScreenshot", map[string]any{"format": "png"})
	if err != nil {
		return nil, err
	}
	var shot struct{ Data []byte }
	err = json.Unmarshal(res, &shot) // base64 decodes into []byte
	return shot.Data, err
}
