package redisadmin

import (
	"strings"
	"testing"
)

func fields(kv ...string) func() [][2]string {
	return func() [][2]string {
		var f [][2]string
		for i := 0; i+1 < len(kv); i += 2 {
			f = append(f, [2]string{kv[i], kv[i+1]})
		}
		return f
	}
}

func TestInfoSelectsAndMerges(t *testing.T) {
	redis := []Section{
		{Name: "Server", Fields: fields("redis_version", "7.0.0")},
		{Name: "Memory", Fields: fields("used_memory", "10")},
		{Name: "Keyspace"},
	}
	calls := 0
	added := []Section{
		{Name: "Memory", Fields: fields("store_bytes", "5")},
		{Name: "Upstream", Fields: func() [][2]string { calls++; return [][2]string{{"up", "1"}} }},
	}
	for _, tc := range []struct {
		args string
		want string
	}{
		{"", "# Server\r\nredis_version:7.0.0\r\n\r\n# Memory\r\nused_memory:10\r\nstore_bytes:5\r\n\r\n# Upstream\r\nup:1\r\n\r\n# Keyspace\r\n"},
		{"MEMORY", "# Memory\r\nused_memory:10\r\nstore_bytes:5\r\n"},
		{"upstream server", "# Server\r\nredis_version:7.0.0\r\n\r\n# Upstream\r\nup:1\r\n"},
		{"sluice", "# Memory\r\nused_memory:10\r\nstore_bytes:5\r\n\r\n# Upstream\r\nup:1\r\n"},
		{"keyspace", "# Keyspace\r\n"},
		{"nosuch", ""},
		{"everything", "# Server\r\nredis_version:7.0.0\r\n\r\n# Memory\r\nused_memory:10\r\nstore_bytes:5\r\n\r\n# Upstream\r\nup:1\r\n\r\n# Keyspace\r\n"},
	} {
		var args [][]byte
		for _, a := range strings.Fields(tc.args) {
			args = append(args, []byte(a))
		}
		if got := Info(args, redis, added); got != tc.want {
			t.Errorf("INFO %s:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
	// A section INFO did not select is not read.
	calls = 0
	Info([][]byte{[]byte("server")}, redis, added)
	if calls != 0 {
		t.Errorf("INFO server read the Upstream section %d times", calls)
	}
}

func TestBytesToHuman(t *testing.T) {
	for n, want := range map[uint64]string{0: "0B", 1003: "1003B", 4130: "4.03K", 100 << 20: "100.00M", 2491081031: "2.32G"} {
		if got := BytesToHuman(n); got != want {
			t.Errorf("BytesToHuman(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestAppendClientLine(t *testing.T) {
	got := string(AppendClientLine(nil, Client{ID: 7, Addr: "127.0.0.1:5", LAddr: "127.0.0.1:6379", FD: 9,
		Name: "n", Age: 3, Idle: 1, Monitor: true, QBuf: 2, QBufFree: 14, OMem: 4, TotMem: 20,
		Cmd: "client|list", Resp: 3, LibName: "redis-py", LibVer: "5.0"}))
	want := "id=7 addr=127.0.0.1:5 laddr=127.0.0.1:6379 fd=9 name=n age=3 idle=1 flags=O db=0 sub=0 psub=0 ssub=0" +
		" multi=-1 watch=0 qbuf=2 qbuf-free=14 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=4 tot-mem=20" +
		" events=r cmd=client|list user=default redir=-1 resp=3 lib-name=redis-py lib-ver=5.0"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
