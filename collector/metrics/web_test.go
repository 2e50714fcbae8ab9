package metrics

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

func TestWebHandler(t *testing.T) {
	x := New(testStatic)
	x.SetSource(func() Snapshot { return hungSnapshot() })
	h, err := x.WebHandler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	for _, tc := range []struct {
		method, path string
		status       int
		body         []string
	}{
		{"GET", "/metrics", 200, []string{"XPU_TIMER_COMMON_HANG{", "xpu_timer_build_info{", "go_goroutines ", "process_resident_memory_bytes ", "go_memstats_heap_inuse_bytes "}},
		{"HEAD", "/metrics", 200, nil},
		{"POST", "/metrics", 405, []string{"method not allowed"}},
		{"PUT", "/metrics", 405, nil},
		{"DELETE", "/metrics", 405, nil},
		{"PATCH", "/metrics", 405, nil},
		{"GET", "/healthz", 200, []string{"ok"}},
		{"POST", "/healthz", 405, nil},
		{"GET", "/", 200, []string{"xpu-timer", `href="/metrics"`, `href="/healthz"`}},
		{"DELETE", "/", 405, nil},
		{"GET", "/nope", 404, nil},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
		}
		if tc.status == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q", tc.method, tc.path, resp.Header.Get("Allow"))
		}
		if tc.method == "HEAD" && len(body) != 0 {
			t.Errorf("HEAD %s: body of %d bytes", tc.path, len(body))
		}
		for _, want := range tc.body {
			if !strings.Contains(string(body), want) {
				t.Errorf("%s %s: body lacks %q", tc.method, tc.path, want)
			}
		}
	}
}

// tlsFiles writes a self-signed certificate for 127.0.0.1 and its key, and a
// web config file serving TLS with basic auth for user "prom", password
// "secret", and returns the config file's and the certificate's paths.
func tlsFiles(t *testing.T) (config, cert string) {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xpu-timer test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	config = filepath.Join(dir, "web.yml")
	os.WriteFile(config, fmt.Appendf(nil, "tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prom: %s\n", cert, keyFile, hash), 0o600)
	return config, cert
}

func serveTest(t *testing.T, o WebOptions) *Server {
	t.Helper()
	x := New(testStatic)
	x.SetSource(func() Snapshot { return hungSnapshot() })
	h, err := x.WebHandler()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Serve(o, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

func TestServeTLSBasicAuth(t *testing.T) {
	config, cert := tlsFiles(t)
	s := serveTest(t, WebOptions{ListenAddresses: []string{"127.0.0.1:0"}, ConfigFile: config})
	pool := x509.NewCertPool()
	data, _ := os.ReadFile(cert)
	pool.AppendCertsFromPEM(data)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(u *url.URL) int {
		resp, err := client.Get(u.String())
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	u := &url.URL{Scheme: "https", Host: s.Addrs[0].String(), Path: "/metrics"}
	if got := get(u); got != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", got)
	}
	u.User = url.UserPassword("prom", "wrong")
	if got := get(u); got != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", got)
	}
	u.User = url.UserPassword("prom", "secret")
	if got := get(u); got != http.StatusOK {
		t.Errorf("right password: %d, want 200", got)
	}
	// Plain HTTP to the TLS port is refused.
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	if resp, err := (&http.Client{Transport: plain, Timeout: 10 * time.Second}).Get("http://prom:secret@" + s.Addrs[0].String() + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served on the TLS port")
		}
	}
}

func TestServeErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "web.yml")
	os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: /nonexistent/cert.pem\n  key_file: /nonexistent/key.pem\n"), 0o600)
	unknown := filepath.Join(t.TempDir(), "web.yml")
	os.WriteFile(unknown, []byte("no_such_setting: 1\n"), 0o600)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, o := range []WebOptions{
		{},
		{ListenAddresses: []string{"127.0.0.1:0"}, ConfigFile: filepath.Join(t.TempDir(), "missing.yml")},
		{ListenAddresses: []string{"127.0.0.1:0"}, ConfigFile: bad},
		{ListenAddresses: []string{"127.0.0.1:0"}, ConfigFile: unknown},
		{ListenAddresses: []string{"127.0.0.1:0", busy.Addr().String()}},
		{ListenAddresses: []string{"nohost.invalid:99999"}},
	} {
		if s, err := Serve(o, http.NotFoundHandler()); err == nil {
			s.Close(context.Background())
			t.Errorf("Serve(%+v) accepted", o)
		}
	}
}

// A real Prometheus scrapes the endpoint over TLS with basic auth.
func TestPrometheusScrapesTLS(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		privileged.Skip(t, "prometheus not installed (scripts/apt-packages.txt)")
	}
	config, cert := tlsFiles(t)
	s := serveTest(t, WebOptions{ListenAddresses: []string{"127.0.0.1:0"}, ConfigFile: config})
	dir := t.TempDir()
	prom := testutil.PrometheusConfig(t, promBin, dir, fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: xpu-timer
    scheme: https
    tls_config: {ca_file: %q}
    basic_auth: {username: prom, password: secret}
    static_configs: [{targets: [%q]}]
  - job_name: no-auth
    scheme: https
    tls_config: {ca_file: %q}
    static_configs: [{targets: [%q]}]
`, cert, s.Addrs[0].String(), cert, s.Addrs[0].String()))
	query := func(q string) []map[string]any {
		resp, err := http.Get("http://" + prom + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Result []map[string]any `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r.Data.Result
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		up := query(`up`)
		hung := query(`XPU_TIMER_COMMON_HANG{job="xpu-timer",rank="1"} == 1`)
		upOf := map[string]string{}
		for _, r := range up {
			upOf[r["metric"].(map[string]any)["job"].(string)] = r["value"].([]any)[1].(string)
		}
		if upOf["xpu-timer"] == "1" && upOf["no-auth"] == "0" && len(hung) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: up %v, hung rank 1 %v (want xpu-timer up, no-auth down, one hung series)", upOf, hung)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
