package tests

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// decision reads a decision reply in either shape, checking that it is
// the one expected: form 2, the array (under RESP2 and RESP3 alike), or
// form 3, the RESP3 map a connection asks for with RL.REPLY MAP.
func decision(t *testing.T, form int, v any) []int64 {
	proto := form
	t.Helper()
	names := []string{"allowed", "limit", "remaining", "retry_after_ms", "reset_after_ms", "delay_ms"}
	switch r := v.(type) {
	case []any:
		if proto != 2 {
			t.Fatalf("a map was asked for (RL.REPLY MAP), and the reply is an array: %v", r)
		}
		out := make([]int64, len(r))
		for i, x := range r {
			out[i] = x.(int64)
		}
		return out
	case map[any]any:
		if proto != 3 {
			t.Fatalf("no map was asked for, and the reply is a map: %v", r)
		}
		out := make([]int64, len(r))
		for i := range len(r) {
			x, ok := r[names[i]]
			if !ok {
				t.Fatalf("map reply %v lacks %q", r, names[i])
			}
			out[i] = x.(int64)
		}
		return out
	}
	t.Fatalf("unexpected reply %T %v", v, v)
	return nil
}

func TestGoRedis(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			s := startSluice(t, append(be.args(t), "--policies", writePolicies(t))...)
			// RESP2, RESP3 (go-redis v9's default): arrays both; then
			// RESP3 with RL.REPLY MAP on each new connection: maps.
			for _, tc := range []struct{ proto, form int }{{2, 2}, {3, 2}, {3, 3}} {
				t.Run(fmt.Sprintf("resp%d-form%d", tc.proto, tc.form), func(t *testing.T) {
					testGoRedis(t, s, tc.proto, tc.form)
				})
			}
		})
	}
}

func testGoRedis(t *testing.T, s *sluice, proto, form int) {
	ctx := ctxT(t)
	opt := &redis.Options{Addr: s.Addr, Protocol: proto}
	if form == 3 {
		opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
			return cn.Do(ctx, "RL.REPLY", "MAP").Err()
		}
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	p := fmt.Sprintf("p%d%d:", proto, form) // keys apart per protocol and form

	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v\n%s", err, s.logs)
	}
	// One request per algorithm: the shape and the first numbers.
	for _, tc := range []struct {
		args []any
		want []int64
	}{
		{[]any{"RL.FIXED", p + "f", 10, "1m"}, []int64{1, 10, 9, 0}},
		{[]any{"RL.SLIDING", p + "s", 10, "1m"}, []int64{1, 10, 9, 0}},
		{[]any{"RL.LOG", p + "l", 10, "1m"}, []int64{1, 10, 9, 0}},
		{[]any{"RL.TOKEN", p + "t", 10, 1, "1s"}, []int64{1, 10, 9, 0, 1000}},
		{[]any{"RL.LEAKY", p + "q", 10, 1, "1s"}, []int64{1, 10, 9, 0, 1000, 0}},
		{[]any{"RL.GCRA", p + "g", 10, 1, "1s", 2}, []int64{1, 11, 9, 0, 2000}},
		{[]any{"RL.GCRA", p + "g", 10, 1, "1s", 0, "PEEK"}, []int64{1, 11}},
		{[]any{"RL.ALLOW", "api", p + "alice"}, []int64{1, 5, 4, 0, 100}},
		{[]any{"RL.ALLOW", "uploads", p + "bob", 2}, []int64{1, 4, 2, 0, 1000, 0}},
	} {
		v, err := rdb.Do(ctx, tc.args...).Result()
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		got := decision(t, form, v)
		wantLen := 5
		if tc.args[0] == "RL.LEAKY" || tc.args[1] == "uploads" {
			wantLen = 6
		}
		if len(got) != wantLen || !reflect.DeepEqual(got[:len(tc.want)], tc.want) {
			t.Errorf("%v = %v, want %v…", tc.args, got, tc.want)
		}
	}
	// CL.THROTTLE is redis-cell's array under both protocols.
	got, err := rdb.Do(ctx, "CL.THROTTLE", p+"user123", 15, 30, 60, 1).Int64Slice()
	if err != nil || !reflect.DeepEqual(got, []int64{0, 16, 15, -1, 2}) {
		t.Errorf("CL.THROTTLE = %v, %v", got, err)
	}

	// A pipeline: 100 decisions on one key with a limit of 60, in order.
	cmds, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for range 100 {
			pipe.Do(ctx, "RL.FIXED", p+"pipe", 60, "1h")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		d := decision(t, form, c.(*redis.Cmd).Val())
		if want := int64(0); i < 60 {
			want = 1
			if d[0] != want || d[2] != int64(59-i) {
				t.Fatalf("pipelined %d = %v", i, d)
			}
		} else if d[0] != want {
			t.Fatalf("pipelined %d = %v, want refused", i, d)
		}
	}
	// Errors in a pipeline stay in their place.
	cmds, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Do(ctx, "RL.FIXED", p+"e", 1, "1s")
		pipe.Do(ctx, "RL.FIXED", p+"e", "abc", "1s")
		pipe.Do(ctx, "RL.FIXED", p+"e", 1, "1s")
		return nil
	})
	if len(cmds) != 3 || cmds[0].Err() != nil || cmds[2].Err() != nil ||
		cmds[1].Err() == nil || cmds[1].Err().Error() != "ERR invalid limit 'abc': must be an integer" {
		t.Errorf("pipeline with an error: %v", cmds)
	}

	// RL.RESET.
	if n, err := rdb.Do(ctx, "RL.RESET", p+"pipe", p+"other").Int64(); err != nil || n != 2 {
		t.Errorf("RL.RESET = %d, %v", n, err)
	}
	v, err := rdb.Do(ctx, "RL.FIXED", p+"pipe", 60, "1h").Result()
	if err != nil || decision(t, form, v)[2] != 59 {
		t.Errorf("after RL.RESET: %v, %v", v, err)
	}

	// Errors, with the argument named.
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"RL.GCRA", "k", 1, 1}, "ERR wrong number of arguments for 'rl.gcra' command"},
		{[]any{"RL.FIXED", "k", 10, 60}, "ERR invalid period '60': needs a unit: did you mean 60s (seconds) or 60ms (milliseconds)?"},
		{[]any{"RL.TOKEN", "k", 10, "NaN", "1s"}, "ERR invalid rate 'NaN': must be an integer"},
		{[]any{"RL.FIXED", "", 10, "1s"}, `ERR invalid key "": must not be empty`},
		{[]any{"CL.THROTTLE", "k", 5, 10, 60, -1}, "ERR invalid quantity -1: must not be negative"},
		{[]any{"RL.ALLOW", "nosuch", "k"}, "ERR invalid policy 'nosuch': no such policy"},
		{[]any{"GET", "k"}, "ERR unknown command 'GET', with args beginning with: 'k' "},
	} {
		if err := rdb.Do(ctx, tc.args...).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}

	// The standard commands.
	if v, err := rdb.Echo(ctx, "hi").Result(); err != nil || v != "hi" {
		t.Errorf("ECHO = %q, %v", v, err)
	}
	if _, err := rdb.ClientID(ctx).Result(); err != nil {
		t.Errorf("CLIENT ID: %v", err)
	}
	if info, err := rdb.Info(ctx, "server").Result(); err != nil || !strings.Contains(info, "sluice_version:") {
		t.Errorf("INFO = %q, %v", info, err)
	}
	if n, err := rdb.Do(ctx, "COMMAND", "COUNT").Int64(); err != nil || n < 19 {
		t.Errorf("COMMAND COUNT = %d, %v", n, err)
	}
	if cmds, err := rdb.Command(ctx).Result(); err != nil || cmds["rl.gcra"] == nil || cmds["rl.gcra"].FirstKeyPos != 1 {
		t.Errorf("COMMAND = %v, %v", cmds["rl.gcra"], err)
	}
	if err := rdb.Do(ctx, "SELECT", 0).Err(); err != nil {
		t.Errorf("SELECT 0: %v", err)
	}
}

func TestGoRedisAuth(t *testing.T) {
	s := startSluice(t, "--requirepass", "s3cret")
	ctx := ctxT(t)
	for _, proto := range []int{2, 3} {
		good := redis.NewClient(&redis.Options{Addr: s.Addr, Password: "s3cret", Protocol: proto, ClientName: "app"})
		if v, err := good.Do(ctx, "RL.FIXED", "k", 10, "1m").Result(); err != nil {
			t.Errorf("RESP%d with the password: %v, %v", proto, v, err)
		}
		if name, err := good.ClientGetName(ctx).Result(); err != nil || name != "app" {
			t.Errorf("RESP%d CLIENT GETNAME = %q, %v", proto, name, err)
		}
		good.Close()
		bad := redis.NewClient(&redis.Options{Addr: s.Addr, Password: "wrong", Protocol: proto})
		if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("RESP%d with a wrong password: %v", proto, err)
		}
		bad.Close()
		none := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: proto})
		if err := none.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("RESP%d without a password: %v", proto, err)
		}
		none.Close()
	}
}
