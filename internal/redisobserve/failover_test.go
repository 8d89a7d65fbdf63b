package redisobserve

import "testing"

func TestParseRepl(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0\r\n" +
		"master_failover_state:no-failover\r\nmaster_replid:aaa\r\nmaster_replid2:bbb\r\nmaster_repl_offset:4242\r\nsecond_repl_offset:100\r\n"
	m, ok := parseRepl(info)
	if !ok || m != (masterRepl{replid: "aaa", replid2: "bbb", offset: 4242, secondOffset: 100, replicas: 1}) {
		t.Fatalf("parseRepl: %+v, %v", m, ok)
	}
	if _, ok := parseRepl("# Replication\r\nrole:slave\r\nmaster_replid:aaa\r\n"); ok {
		t.Fatal("a replica's INFO read as a master's")
	}
}

// The failovers seen, and the bytes known lost, as masters come and go.
func TestReplWatch(t *testing.T) {
	const none = "0000000000000000000000000000000000000000"
	for _, tc := range []struct {
		name  string
		looks []masterRepl
		want  Replication
	}{
		{"one master going on", []masterRepl{{replid: "a", replid2: none, offset: 10, secondOffset: -1}, {replid: "a", replid2: none, offset: 20, secondOffset: -1}},
			Replication{}},
		{"promoted with everything", []masterRepl{{replid: "a", replid2: none, offset: 100}, {replid: "b", replid2: "a", offset: 120, secondOffset: 101}},
			Replication{Failovers: 1}},
		{"promoted behind what was seen", []masterRepl{{replid: "a", replid2: none, offset: 100}, {replid: "b", replid2: "a", offset: 120, secondOffset: 61}},
			Replication{Failovers: 1, LostFailovers: 1, LostBytes: 40}},
		{"counted once", []masterRepl{{replid: "a", offset: 100}, {replid: "b", replid2: "a", offset: 120, secondOffset: 61}, {replid: "b", replid2: "a", offset: 130, secondOffset: 61}},
			Replication{Failovers: 1, LostFailovers: 1, LostBytes: 40}},
		{"a stream never seen", []masterRepl{{replid: "b", replid2: "a", offset: 120, secondOffset: 61}},
			Replication{}},
		{"two failovers in a row", []masterRepl{{replid: "a", offset: 100}, {replid: "b", replid2: "a", offset: 150, secondOffset: 101}, {replid: "c", replid2: "b", offset: 150, secondOffset: 141}},
			Replication{Failovers: 2, LostFailovers: 1, LostBytes: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w replWatch
			for _, m := range tc.looks {
				w.observe(m)
			}
			if w.stats != tc.want {
				t.Errorf("got %+v, want %+v", w.stats, tc.want)
			}
		})
	}
}
