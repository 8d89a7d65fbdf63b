package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-rl/sluice/inject"
	"github.com/sluice-rl/sluice/internal/accept"
	"github.com/sluice-rl/sluice/internal/settings"
)

// SidecarPrefix is before the name of every sidecar setting among the
// webhook's flags: --sidecar-image, --sidecar-on-upstream-failure. (A
// pod's annotations have no prefix: sluice.io/on-upstream-failure.)
const SidecarPrefix = "sidecar-"

// Flags are the webhook's own settings.
type Flags struct {
	Listen      string // HTTPS address of the reviews
	AdminListen string // HTTP address of /metrics and /healthz; "off": none
	TLSCert     string
	TLSKey      string
	LogLevel    slog.Level
	LogFormat   string // json (the default: what a cluster's log pipeline reads) or text
}

// Main is `sluice webhook`: args are its flags, after "webhook"; it serves
// until ctx ends or SIGTERM, and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := Flags{Listen: ":8443", AdminListen: ":9443", LogFormat: "json"}
	s := inject.DefaultSettings()
	fs := flag.NewFlagSet("sluice webhook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.Listen, "listen", f.Listen, "HTTPS `address` the API server sends admission reviews to (path /inject)")
	fs.StringVar(&f.AdminListen, "admin-listen", f.AdminListen, "HTTP `address` of /metrics and /healthz; \"off\": none")
	fs.StringVar(&f.TLSCert, "tls-cert", "", "PEM `file` of the serving certificate (and its chain); reloaded when it changes")
	fs.StringVar(&f.TLSKey, "tls-key", "", "PEM `file` of the serving certificate's key; reloaded when it changes")
	fs.TextVar(&f.LogLevel, "log-level", f.LogLevel, "log `level`: debug, info, warn or error")
	fs.StringVar(&f.LogFormat, "log-format", f.LogFormat, "log `format`: json or text")
	s.RegisterPrefixed(fs, SidecarPrefix)
	if err := settings.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			inject.Usage(stdout, fs, webhookUsage, SidecarPrefix)
			return 0
		}
		fmt.Fprintf(stderr, "sluice webhook: %v\nRun sluice webhook --help for the flags.\n", err)
		return 2
	}
	err := inject.CheckFlags(fs, SidecarPrefix)
	switch {
	case err != nil:
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q: sluice webhook takes only flags", fs.Arg(0))
	case f.LogFormat != "json" && f.LogFormat != "text":
		err = fmt.Errorf("invalid --log-format %q: must be json or text", f.LogFormat)
	case f.TLSCert == "" || f.TLSKey == "":
		err = errors.New("--tls-cert and --tls-key are required: the API server calls webhooks over HTTPS only")
	default:
		err = s.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice webhook: %v\n", err)
		return 2
	}
	log := (&settings.Config{LogFormat: f.LogFormat, LogLevel: f.LogLevel}).NewLogger(stderr)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := listenAndServe(ctx, f, s, log); err != nil {
		log.Error("sluice webhook stopped", "err", err)
		return 1
	}
	return 0
}

func listenAndServe(ctx context.Context, f Flags, s inject.Settings, log *slog.Logger) error {
	cert, err := LoadCertificate(f.TLSCert, f.TLSKey, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return err
	}
	var aln net.Listener
	if f.AdminListen != "off" && f.AdminListen != "" {
		if aln, err = net.Listen("tcp", f.AdminListen); err != nil {
			ln.Close()
			return fmt.Errorf("admin listener: %w", err)
		}
	}
	return Serve(ctx, ln, aln, cert, s, log)
}

const webhookUsage = `Usage: sluice webhook --tls-cert FILE --tls-key FILE [flags]

A Kubernetes mutating admission webhook that adds the Sluice sidecar to
the pods the API server sends it (see deploy/webhook), as sluice inject
does to files. The sidecar's settings are sluice inject's flags, each
with the prefix --sidecar-; a pod's annotations sluice.io/<setting>
override them for that pod.

Flags:
`

// Serve answers reviews over TLS on ln with cert, and serves /metrics and
// /healthz on adminLn (nil: none), until ctx ends; then it stops within
// five seconds. It closes both listeners.
func Serve(ctx context.Context, ln, adminLn net.Listener, cert *Certificate, s inject.Settings, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := New(Config{Settings: s, Logger: log, Registry: reg})
	if err != nil {
		ln.Close()
		if adminLn != nil {
			adminLn.Close()
		}
		return err
	}
	srv := &http.Server{Handler: h.Mux(), ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert.GetCertificate}}
	servers := []*http.Server{srv}
	errc := make(chan error, 2)
	go func() { errc <- srv.ServeTLS(accept.Retrying(ln, log, "webhook"), "", "") }()
	log.Info("sluice webhook: serving admission reviews", "addr", ln.Addr().String(), "path", "/inject")
	if adminLn != nil {
		admin := &http.Server{Handler: AdminMux(reg), ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, admin)
		go func() { errc <- admin.Serve(accept.Retrying(adminLn, log, "webhook admin")) }()
		log.Info("sluice webhook: admin endpoints", "addr", adminLn.Addr().String(), "paths", "/metrics /healthz")
	}
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
