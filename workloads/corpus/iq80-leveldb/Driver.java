// powercut corpus driver for iq80 LevelDB (org.iq80.leveldb:leveldb, the pure-Java LevelDB port).
//
//   driver run    the workload: opens ./db with Iq80DBFactory (createIfMissing), puts k<i> with
//                 WriteOptions.sync(true) -- the durable write of LevelDB's docs -- and acknowledges
//                 each put that returned (powercut-mark begin:<i> before, ack:<i> after).  Every
//                 `reopen` puts it closes the database and opens it again, as an application that
//                 restarts does (LevelDB writes a new MANIFEST and points CURRENT at it on every
//                 open).  Ends with a close.
//   driver check  the checker: opens ./db with the same release and options (its own recovery:
//                 CURRENT, the MANIFEST it names, the logs), reads every acknowledged key back and
//                 scans the database.  An open or a read that fails is corrupt-data with the
//                 release's message; an acked key missing is lost-ack; a wrong value, or a key
//                 never begun, is corrupt-data.  No ./db and nothing acked: pass.
//
// Parameters ($POWERCUT_PARAMS, a JSON object; all optional):
//   n (40) puts; reopen (5) puts between reopens (0: never); vsize (100) bytes per value.

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

import org.iq80.leveldb.DB;
import org.iq80.leveldb.DBIterator;
import org.iq80.leveldb.Options;
import org.iq80.leveldb.WriteOptions;
import org.iq80.leveldb.impl.Iq80DBFactory;

public final class Driver {
    static final String DB_DIR = "db";

    public static void main(String[] args) throws Exception {
        if (args.length != 1 || !(args[0].equals("run") || args[0].equals("check"))) {
            System.err.println("usage: driver run|check");
            System.exit(2);
        }
        if (args[0].equals("run")) {
            System.exit(run(Corpus.parseParams(System.getenv("POWERCUT_PARAMS"))));
        }
        check();
    }

    static Options options() {
        return new Options().createIfMissing(true);
    }

    static byte[] key(int i) {
        return ("k" + i).getBytes(StandardCharsets.UTF_8);
    }

    static byte[] value(int i, int vsize) {
        StringBuilder sb = new StringBuilder("value-" + i + "-");
        while (sb.length() < vsize) {
            sb.append((char) ('a' + (sb.length() * 7 + i) % 26));
        }
        return sb.toString().getBytes(StandardCharsets.UTF_8);
    }

    static int run(Map<String, Object> params) throws Exception {
        int n = Corpus.intParam(params, "n", 40);
        int reopen = Corpus.intParam(params, "reopen", 5);
        int vsize = Corpus.intParam(params, "vsize", 100);
        File dir = new File(DB_DIR);
        WriteOptions sync = new WriteOptions().sync(true);
        DB db = Iq80DBFactory.factory.open(dir, options());
        try {
            for (int i = 0; i < n; i++) {
                if (reopen > 0 && i > 0 && i % reopen == 0) {
                    db.close();
                    db = Iq80DBFactory.factory.open(dir, options());
                }
                Corpus.mark("begin:" + i);
                db.put(key(i), value(i, vsize), sync);
                Corpus.mark("ack:" + i);
            }
        } finally {
            db.close();
        }
        return 0;
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
            String mount = in.get("mount") instanceof String ? (String) in.get("mount") : ".";
            verdict = judge(mount, acked, begun, params, reasons);
        } catch (Throwable e) {
            verdict = "corrupt-data";
            reasons.add("checker: " + describe(e));
        }
        StringBuilder sb = new StringBuilder("{\"verdict\": ").append(Corpus.quote(verdict)).append(", \"reasons\": [");
        for (int i = 0; i < reasons.size(); i++) {
            sb.append(i > 0 ? ", " : "").append(Corpus.quote(reasons.get(i)));
        }
        out.println(sb.append("]}"));
        out.flush();
        System.exit(0);
    }

    static String judge(String mount, List<String> acked, Set<String> begun,
                        Map<String, Object> params, List<String> reasons) {
        int vsize = Corpus.intParam(params, "vsize", 100);
        File dir = new File(mount, DB_DIR);
        String[] entries = dir.list();
        if (acked.isEmpty() && (entries == null || entries.length == 0)) {
            return "pass"; // the database was not created yet
        }
        DB db;
        try {
            db = Iq80DBFactory.factory.open(dir, options());
        } catch (Throwable e) {
            reasons.add("open failed: " + describe(e));
            return "corrupt-data";
        }
        String verdict = "pass";
        try {
            List<String> lost = new ArrayList<>();
            for (String k : acked) {
                int i = Integer.parseInt(k);
                byte[] v;
                try {
                    v = db.get(key(i));
                } catch (Throwable e) {
                    reasons.add("get k" + i + " failed: " + describe(e));
                    return "corrupt-data";
                }
                if (v == null) {
                    lost.add(k);
                } else if (!Arrays.equals(v, value(i, vsize))) {
                    reasons.add("acked k" + i + " has a wrong value: "
                            + new String(v, StandardCharsets.UTF_8));
                    verdict = "corrupt-data";
                }
            }
            try (DBIterator it = db.iterator()) {
                for (it.seekToFirst(); it.hasNext(); ) {
                    Map.Entry<byte[], byte[]> e = it.next();
                    String k = new String(e.getKey(), StandardCharsets.UTF_8);
                    String idx = k.startsWith("k") ? k.substring(1) : k;
                    if (!begun.contains(idx)) {
                        reasons.add("key " + k + " was never written");
                        verdict = "corrupt-data";
                    } else if (!Arrays.equals(e.getValue(), value(Integer.parseInt(idx), vsize))) {
                        reasons.add("key " + k + " has a wrong value");
                        verdict = "corrupt-data";
                    }
                }
            } catch (Throwable e) {
                reasons.add("scan failed: " + describe(e));
                return "corrupt-data";
            }
            if (!lost.isEmpty()) {
                reasons.add(0, lost.size() + " of " + acked.size() + " acked keys lost: k"
                        + String.join(", k", lost.subList(0, Math.min(10, lost.size())))
                        + (lost.size() > 10 ? ", ..." : ""));
                if (verdict.equals("pass")) {
                    verdict = "lost-ack";
                }
            }
        } finally {
            try {
                db.close();
            } catch (Throwable e) {
                // a close that fails after the reads judged nothing
            }
        }
        return verdict;
    }

    static String describe(Throwable e) {
        StringBuilder sb = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (sb.length() > 0) {
                sb.append("; caused by ");
            }
            sb.append(t.getClass().getName());
            if (t.getMessage() != null) {
                sb.append(": ").append(t.getMessage());
            }
            StackTraceElement[] st = t.getStackTrace();
            if (st.length > 0) {
                sb.append(" (at ").append(frame(st[0]));
                for (StackTraceElement f : st) {
                    if (f != st[0] && f.getClassName().startsWith("org.iq80.leveldb.")) {
                        sb.append(", in ").append(frame(f));
                        break;
                    }
                }
                sb.append(')');
            }
        }
        return sb.toString();
    }

    static String frame(StackTraceElement f) {
        String cls = f.getClassName();
        return cls.substring(cls.lastIndexOf('.') + 1) + "." + f.getMethodName();
    }

    // ---- parameters and a minimal JSON reader ------------------------------------------------

}
