package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/exporter-toolkit/web"

	"github.com/xpu-timer/xpu-timer/internal/version"
)

// WebOptions configure the HTTP endpoint the way Prometheus exporters do.
type WebOptions struct {
	// ListenAddresses are host:port pairs to serve on (--web.listen-address);
	// ":18889" serves every interface, "127.0.0.1:18889" loopback only.
	ListenAddresses []string
	// ConfigFile is the exporter-toolkit web configuration
	// (--web.config.file): TLS, client certificates, basic auth users with
	// bcrypt hashes, headers. "" serves plain HTTP without auth.
	ConfigFile string
	Logger     *slog.Logger // nil discards
}

// WebHandler is everything the endpoint serves: /metrics (GET and HEAD only),
// /healthz, and a landing page at /.
func (x *Exporter) WebHandler() (http.Handler, error) {
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        "xpu-timer",
		Description: "Hang detector for distributed GPU training",
		Version:     version.String(),
		Profiling:   "false", // no /debug/pprof here
		Links: []web.LandingLinks{
			{Address: "metrics", Text: "Metrics"},
			{Address: "healthz", Text: "Health", Description: "200 while the exporter runs"},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("landing page: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", getOrHead(x.Handler()))
	mux.Handle("/healthz", getOrHead(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})))
	mux.Handle("/{$}", getOrHead(landing))
	return mux, nil
}

// getOrHead answers any method but GET and HEAD with 405.
func getOrHead(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Server is a running endpoint.
type Server struct {
	Addrs []net.Addr // where it listens, in the order of ListenAddresses

	srv  *http.Server
	done chan struct{}
}

// Serve checks the web configuration, listens on every address and serves
// h in the background. It fails, listening nowhere, when the configuration
// file is invalid or an address cannot be listened on.
func Serve(o WebOptions, h http.Handler) (*Server, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(o.ListenAddresses) == 0 {
		return nil, errors.New("no listen address")
	}
	if o.ConfigFile != "" {
		if err := web.Validate(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("web config file %s: %w", o.ConfigFile, err)
		}
	}
	s := &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}, done: make(chan struct{})}
	var lns []net.Listener
	for _, a := range o.ListenAddresses {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("listen on %s: %w", a, err)
		}
		lns = append(lns, ln)
		s.Addrs = append(s.Addrs, ln.Addr())
	}
	cfg := o.ConfigFile
	flags := &web.FlagConfig{WebListenAddresses: &o.ListenAddresses, WebConfigFile: &cfg}
	go func() {
		defer close(s.done)
		if err := web.ServeMultiple(lns, s.srv, flags, log); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics endpoint stopped", "err", err)
		}
	}()
	return s, nil
}

// Close stops the server, waiting up to the context's deadline for
// requests in flight.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	return err
}
