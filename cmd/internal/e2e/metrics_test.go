package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sample is one line of Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)`)
	labelRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseText reads the samples of a text exposition.
func parseText(text string) []sample {
	var out []sample
	for l := range strings.SplitSeq(text, "\n") {
		m := sampleRe.FindStringSubmatch(l)
		if m == nil || strings.HasPrefix(l, "#") {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, lm := range labelRe.FindAllStringSubmatch(m[2], -1) {
			s.labels[lm[1]] = lm[2]
		}
		out = append(out, s)
	}
	return out
}

// byRank returns the values of family name by its rank label.
func byRank(samples []sample, name string) map[string]float64 {
	m := map[string]float64{}
	for _, s := range samples {
		if s.name == name {
			m[s.labels["rank"]] = s.value
		}
	}
	return m
}

// scrape GETs url and returns the body; err when it cannot.
func scrape(url string) (string, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func mustScrape(t *testing.T, url string) string {
	t.Helper()
	body, err := scrape(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return body
}

// dlroverHung is DLRover's rule, word for word: keep the lines that start
// with XPU_TIMER_COMMON_HANG; the worker is hung when every one of them
// ends in 1.
func dlroverHung(text string) bool {
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(l, "XPU_TIMER_COMMON_HANG") && !strings.HasSuffix(strings.TrimSpace(l), "1") {
			return false
		}
	}
	return true
}
