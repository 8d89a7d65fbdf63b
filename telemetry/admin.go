package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/sluice-rl/sluice/internal/accept"
)

// Admin is the admin HTTP server: Handler's /metrics, /healthz and
// /readyz on a port of their own.
type Admin struct {
	addr string // as asked; empty: off
	ln   net.Listener
	srv  *http.Server
}

// ListenAdmin starts serving Handler on addr, unless addr is empty (off).
// When optional (the address left at its default) and another process
// holds it (a second sidecar on this machine), the admin server is off
// with a warning, rather than the sidecar stopped; an address asked for
// must be had.
//
// The admin port shows counts and health, never keys or decisions on
// demand, so unlike the RESP port it may listen beyond loopback (a
// Prometheus in another pod scrapes it) without a password.
func (t *Telemetry) ListenAdmin(addr string, optional bool, log *slog.Logger) (*Admin, error) {
	a := &Admin{addr: addr}
	if addr == "" {
		return a, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil && optional && errors.Is(err, syscall.EADDRINUSE) {
		log.Warn("admin endpoints off: /metrics, /healthz and /readyz are not served, as the default admin address is taken; "+
			"set --admin-listen to another address, or off", "addr", addr, "err", err)
		return a, nil
	}
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	a.ln = accept.Retrying(ln, log, "admin")
	a.srv = &http.Server{Handler: t.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "err", err)
		}
	}()
	log.Info("admin endpoints", "addr", ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	return a, nil
}

// Addr is the address served, nil when the admin server is off.
func (a *Admin) Addr() net.Addr {
	if a.ln == nil {
		return nil
	}
	return a.ln.Addr()
}

// Info is INFO's Admin section: where /metrics, /healthz and /readyz are
// served, or that they are not (admin_serving:0), which a taken default
// address leaves only a log line otherwise.
func (a *Admin) Info() [][2]string {
	addr, serving := a.addr, "0"
	if a.ln != nil {
		addr, serving = a.ln.Addr().String(), "1"
	}
	if addr == "" {
		addr = "off"
	}
	return [][2]string{{"admin_listen", addr}, {"admin_serving", serving}}
}

// Shutdown stops serving, waiting for requests in progress until ctx ends.
func (a *Admin) Shutdown(ctx context.Context) error {
	if a.srv == nil {
		return nil
	}
	return a.srv.Shutdown(ctx)
}
