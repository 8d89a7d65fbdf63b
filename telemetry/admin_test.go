package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestAdmin serves the admin port, or not, as asked, and says which in
// INFO's Admin section.
func TestAdmin(t *testing.T) {
	tel, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	held := taken.Addr().String()
	for _, tc := range []struct {
		name     string
		addr     string
		optional bool
		err      string
		info     string // "" when it serves: admin_listen is then the port it got
	}{
		{"off", "", false, "", "admin_listen:off admin_serving:0"},
		{"serving", "127.0.0.1:0", false, "", ""},
		{"default taken", held, true, "", "admin_listen:" + held + " admin_serving:0"},
		{"asked for and taken", held, false, "admin listener: listen tcp " + held, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := tel.ListenAdmin(tc.addr, tc.optional, slog.New(slog.DiscardHandler))
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("%v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer a.Shutdown(context.Background())
			var info []string
			for _, f := range a.Info() {
				info = append(info, f[0]+":"+f[1])
			}
			got := strings.Join(info, " ")
			if tc.info != "" {
				if got != tc.info || a.Addr() != nil {
					t.Errorf("INFO %q, serving %v; want %q", got, a.Addr(), tc.info)
				}
				return
			}
			if want := "admin_listen:" + a.Addr().String() + " admin_serving:1"; got != want {
				t.Errorf("INFO %q, want %q", got, want)
			}
			res, err := http.Get("http://" + a.Addr().String() + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(body) != "ok\n" {
				t.Errorf("/healthz: %d %q", res.StatusCode, body)
			}
		})
	}
}
