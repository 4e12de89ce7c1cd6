// powercut corpus driver for RocksDB, through its Java binding (org.rocksdb:rocksdbjni), as an
// application that makes its writes durable in groups: it writes without a sync and then asks
// for the write-ahead log to be synced (DB::FlushWAL(true), "flushWal(true)" in Java).
//
//   driver run    the workload: opens (creates) the database ./db with a small memtable
//                 (write_buffer_size, so memtables fill and are switched and flushed often; each
//                 switch starts a new WAL file) and `threads` writer threads that share it; each
//                 writer takes the next key i, writes k<i> with the default WriteOptions
//                 (sync=false), then calls flushWal(true) -- "sync the WAL", RocksDB's documented
//                 way to make the writes made so far durable -- and then acknowledges k<i>
//                 (powercut-mark begin:<i> before the write, ack:<i> after flushWal returned).
//   driver check  the checker: opens the recovered ./db with the same release (RocksDB's own
//                 recovery: MANIFEST, tables, WAL replay in the default point-in-time mode) and
//                 reads back every acknowledged key.  An open that fails is corrupt-data with
//                 RocksDB's message; a missing acked key is lost-ack; a wrong value, or a key
//                 never begun, is corrupt-data.
//
// Parameters ($POWERCUT_PARAMS, a JSON object; all optional):
//   n (160) keys; threads (8) concurrent writers; vsize (16384) bytes per value;
//   wbuf (32768) the memtable's size, Options.write_buffer_size (two values fill it); wbufs (8)
//   memtables kept before writes stall, Options.max_write_buffer_number.

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.RocksIterator;
import org.rocksdb.WriteOptions;

public final class Driver {
    static final String DB_DIR = "db";
    static final int MAX_REASONS = 12;

    public static void main(String[] args) throws Exception {
        if (args.length != 1 || !(args[0].equals("run") || args[0].equals("check"))) {
            System.err.println("usage: driver run|check");
            System.exit(2);
        }
        if (args[0].equals("check")) {
            check();
            return;
        }
        int rc;
        try {
            rc = run(Corpus.parseParams(System.getenv("POWERCUT_PARAMS")));
        } catch (Throwable e) {
            e.printStackTrace();
            rc = 1;
        }
        System.out.flush();
        System.err.flush();
        System.exit(rc);
    }

    static Options options(Map<String, Object> params, boolean create) {
        return new Options()
                .setCreateIfMissing(create)
                .setWriteBufferSize(Corpus.intParam(params, "wbuf", 32768))
                .setMaxWriteBufferNumber(Corpus.intParam(params, "wbufs", 8));
    }

    // ---- the workload -------------------------------------------------------------------------

    static int run(Map<String, Object> params) throws Exception {
        int n = Corpus.intParam(params, "n", 160);
        int threads = Math.max(1, Corpus.intParam(params, "threads", 8));
        int vsize = Corpus.intParam(params, "vsize", 16384);
        RocksDB.loadLibrary();
        AtomicInteger next = new AtomicInteger(0);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        try (Options opts = options(params, true);
             RocksDB db = RocksDB.open(opts, new File(DB_DIR).getAbsolutePath());
             WriteOptions wo = new WriteOptions()) {
            List<Thread> workers = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Thread w = new Thread(() -> {
                    try {
                        for (int i = next.getAndIncrement(); i < n && failure.get() == null;
                             i = next.getAndIncrement()) {
                            Corpus.mark("begin:" + i);
                            db.put(wo, key(i), value(i, vsize));
                            db.flushWal(true);
                            Corpus.mark("ack:" + i);
                        }
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                    }
                });
                w.start();
                workers.add(w);
            }
            for (Thread w : workers) {
                w.join();
            }
        }
        if (failure.get() != null) {
            failure.get().printStackTrace();
            return 1;
        }
        return 0;
    }

    static byte[] key(int i) {
        return ("k" + i).getBytes(StandardCharsets.UTF_8);
    }

    static byte[] value(int i, int vsize) {
        byte[] v = new byte[vsize];
        byte[] head = ("value-" + i + "-").getBytes(StandardCharsets.UTF_8);
        for (int j = 0; j < vsize; j++) {
            v[j] = j < head.length ? head[j] : (byte) ('a' + (j * 7 + i) % 26);
        }
        return v;
    }

    // ---- the checker --------------------------------------------------------------------------

    static void check() {
        PrintStream out = System.out;
        String verdict;
        List<String> reasons = new ArrayList<>();
        try {
            Map<String, Object> in = Corpus.asObject(new Corpus.Json(Corpus.readAll(System.in)).parse());
            List<String> acked = Corpus.stringList(in.get("acked"));
            Set<String> begun = new HashSet<>(Corpus.stringList(in.get("begun")));
            begun.addAll(acked);
            Map<String, Object> params = in.get("params") instanceof Map ? Corpus.asObject(in.get("params"))
                    : new LinkedHashMap<>();
            verdict = judge(in.get("mount") instanceof String ? (String) in.get("mount") : ".",
                    acked, begun, params, reasons);
        } catch (Throwable e) {
            verdict = "corrupt-data";
            reasons.add("checker failed: " + describe(e));
        }
        StringBuilder sb = new StringBuilder("{\"verdict\": ").append(Corpus.quote(verdict))
                .append(", \"reasons\": [");
        for (int i = 0; i < reasons.size(); i++) {
            sb.append(i > 0 ? ", " : "").append(Corpus.quote(reasons.get(i)));
        }
        sb.append("]}");
        System.err.flush();
        out.println(sb);
        out.flush();
        Runtime.getRuntime().halt(0);
    }

    static String judge(String mount, List<String> acked, Set<String> begun,
                        Map<String, Object> params, List<String> reasons) throws Exception {
        int vsize = Corpus.intParam(params, "vsize", 16384);
        File dir = new File(mount, DB_DIR).getAbsoluteFile();
        if (!new File(dir, "CURRENT").isFile()) {
            if (acked.isEmpty()) {
                return "pass";
            }
            reasons.add("no database (" + DB_DIR + "/CURRENT), yet " + acked.size()
                    + " writes were acked");
            return "lost-ack";
        }
        RocksDB.loadLibrary();
        RocksDB db;
        Options opts = options(params, false);
        try {
            db = RocksDB.open(opts, dir.getPath());
        } catch (RocksDBException e) {
            reasons.add("open failed: " + describe(e));
            return "corrupt-data";
        }
        int lost = 0;
        int corrupt = 0;
        List<String> lostKeys = new ArrayList<>();
        for (String k : acked) {
            int i;
            try {
                i = Integer.parseInt(k);
            } catch (NumberFormatException e) {
                corrupt++;
                note(reasons, "acked key " + k + " is not one the driver writes");
                continue;
            }
            byte[] got;
            try {
                got = db.get(key(i));
            } catch (RocksDBException e) {
                corrupt++;
                note(reasons, "reading acked key " + i + " (k" + i + ") failed: " + describe(e));
                continue;
            }
            if (got == null) {
                lost++;
                lostKeys.add(Integer.toString(i));
            } else if (!Arrays.equals(got, value(i, vsize))) {
                corrupt++;
                note(reasons, "acked key " + i + " (k" + i + ") has a wrong value ("
                        + got.length + " bytes, starting "
                        + new String(got, 0, Math.min(24, got.length), StandardCharsets.UTF_8) + ")");
            }
        }
        try (RocksIterator it = db.newIterator()) {
            for (it.seekToFirst(); it.isValid(); it.next()) {
                String k = new String(it.key(), StandardCharsets.UTF_8);
                if (!k.matches("k[0-9]+") || !begun.contains(k.substring(1))) {
                    corrupt++;
                    note(reasons, "key " + k + " was never written by the workload");
                }
            }
            it.status();
        } catch (RocksDBException e) {
            corrupt++;
            note(reasons, "scanning the database failed: " + describe(e));
        }
        db.close();
        if (lost > 0) {
            // keys as bare numbers (the acked keys powercut names), counts never bare (n=L/A):
            // powercut reads the reasons' words that are acked keys as the keys lost
            List<String> shown = lostKeys.subList(0, Math.min(10, lostKeys.size()));
            List<String> lines = new ArrayList<>();
            lines.add("acked key " + shown.get(0) + " is missing after recovery (lost n=" + lost + "/"
                    + acked.size() + " acked: " + String.join(" ", shown)
                    + (lostKeys.size() > shown.size() ? " ..." : "") + ")");
            for (String k : shown.subList(1, shown.size())) {
                lines.add("acked key " + k + " is missing after recovery");
            }
            reasons.addAll(0, lines);
        }
        if (corrupt > 0) {
            return "corrupt-data";
        }
        return lost > 0 ? "lost-ack" : "pass";
    }

    static void note(List<String> reasons, String text) {
        if (reasons.size() < MAX_REASONS) {
            reasons.add(text);
        }
    }

    static String describe(Throwable e) {
        StringBuilder sb = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (sb.length() > 0) {
                sb.append("; caused by ");
            }
            sb.append(t.getClass().getSimpleName());
            if (t instanceof RocksDBException && ((RocksDBException) t).getStatus() != null) {
                sb.append(" [").append(((RocksDBException) t).getStatus().getCodeString()).append(']');
            }
            if (t.getMessage() != null) {
                sb.append(": ").append(t.getMessage());
            }
        }
        return sb.toString();
    }

    // ---- parameters and a minimal JSON reader ------------------------------------------------

}
