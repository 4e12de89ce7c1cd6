// powercut corpus driver for Apache ZooKeeper (standalone server, embedded in this JVM).
//
//   driver run    the workload: starts a standalone ZooKeeper server on ./zk (dataDir, which
//                 also holds the transaction logs, as in the sample zoo.cfg), with the default
//                 forceSync=yes and a small snapCount so that the server rolls its transaction
//                 log and snapshots often; `clients` client sessions then create the znodes
//                 /k<i> concurrently, each with the synchronous create(); a create that returned
//                 is acknowledged (powercut-mark begin:<i> before, ack:<i> after).  Then it
//                 closes the sessions and shuts the server down.
//   driver check  the checker: starts the same release's server on the recovered ./zk (the
//                 server's own start-up recovery: latest snapshot plus transaction logs), and
//                 reads back every acknowledged znode through a client session.  A server that
//                 does not start is corrupt-data with its exception; a missing acked znode is
//                 lost-ack; a wrong value, or a /k<i> never begun, is corrupt-data.
//
// Parameters ($POWERCUT_PARAMS, a JSON object; all optional):
//   n (100) znodes to create; clients (4) concurrent client sessions; snapcount (10) the
//   server's zookeeper.snapCount; vsize (64) bytes per value.

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.InputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.server.ServerCnxnFactory;
import org.apache.zookeeper.server.ZooKeeperServer;

public final class Driver {
    static final String DATA_DIR = "zk";
    static final int TICK_TIME = 2000;
    static final int SESSION_TIMEOUT = 30000;

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
            // The server's non-daemon threads would keep a failed run alive: report and stop.
            e.printStackTrace();
            rc = 1;
        }
        System.out.flush();
        System.err.flush();
        System.exit(rc);
    }

    // ---- the workload -------------------------------------------------------------------------

    static int run(Map<String, Object> params) throws Exception {
        int n = Corpus.intParam(params, "n", 100);
        int clients = Math.max(1, Corpus.intParam(params, "clients", 4));
        int snapCount = Corpus.intParam(params, "snapcount", 10);
        int vsize = Corpus.intParam(params, "vsize", 64);
        // zoo.cfg's snapCount is the system property zookeeper.snapCount (read when the server's
        // classes load, so set before the first server class is touched).
        System.setProperty("zookeeper.snapCount", Integer.toString(snapCount));

        File dir = new File(DATA_DIR).getAbsoluteFile();
        ZooKeeperServer zks = new ZooKeeperServer(dir, dir, TICK_TIME);
        ServerCnxnFactory factory = ServerCnxnFactory.createFactory(
                new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), clients + 10);
        factory.startup(zks);
        String connect = "127.0.0.1:" + factory.getLocalPort();

        List<ZooKeeper> sessions = new ArrayList<>();
        for (int c = 0; c < clients; c++) {
            sessions.add(connect(connect));
        }
        AtomicInteger next = new AtomicInteger(0);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (ZooKeeper zk : sessions) {
            Thread t = new Thread(() -> {
                try {
                    for (int i = next.getAndIncrement(); i < n && failure.get() == null;
                         i = next.getAndIncrement()) {
                        Corpus.mark("begin:" + i);
                        zk.create("/k" + i, value(i, vsize), ZooDefs.Ids.OPEN_ACL_UNSAFE,
                                CreateMode.PERSISTENT);
                        Corpus.mark("ack:" + i);
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        for (ZooKeeper zk : sessions) {
            zk.close();
        }
        factory.shutdown();
        zks.shutdown();
        if (failure.get() != null) {
            failure.get().printStackTrace();
            return 1;
        }
        return 0;
    }

    static ZooKeeper connect(String connect) throws Exception {
        CountDownLatch up = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(connect, SESSION_TIMEOUT, event -> {
            if (event.getState() == Watcher.Event.KeeperState.SyncConnected) {
                up.countDown();
            }
        });
        if (!up.await(SESSION_TIMEOUT, TimeUnit.MILLISECONDS)) {
            zk.close();
            throw new IllegalStateException("no session with the server at " + connect);
        }
        return zk;
    }

    static byte[] value(int i, int vsize) {
        StringBuilder sb = new StringBuilder("value-" + i + "-");
        while (sb.length() < vsize) {
            sb.append((char) ('a' + (sb.length() * 7 + i) % 26));
        }
        return sb.toString().getBytes(StandardCharsets.UTF_8);
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
        // The store is a throwaway clone: no need to wait for the server's threads to wind down.
        Runtime.getRuntime().halt(0);
    }

    static String judge(String mount, List<String> acked, Set<String> begun,
                        Map<String, Object> params, List<String> reasons) throws Exception {
        int vsize = Corpus.intParam(params, "vsize", 64);
        File dir = new File(mount, DATA_DIR).getAbsoluteFile();
        if (!dir.isDirectory()) {
            if (acked.isEmpty()) {
                return "pass";
            }
            reasons.add("no ZooKeeper data directory " + DATA_DIR + "/, yet " + acked.size()
                    + " creates were acked");
            return "lost-ack";
        }
        ZooKeeperServer zks;
        ServerCnxnFactory factory;
        try {
            zks = new ZooKeeperServer(dir, dir, TICK_TIME);
            factory = ServerCnxnFactory.createFactory(
                    new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 10);
            factory.startup(zks);
        } catch (Throwable e) {
            reasons.add("server failed to start (load database): " + describe(e));
            return "corrupt-data";
        }
        ZooKeeper zk = connect("127.0.0.1:" + factory.getLocalPort());
        boolean lost = false;
        boolean corrupt = false;
        for (String key : acked) {
            int i;
            try {
                i = Integer.parseInt(key);
            } catch (NumberFormatException e) {
                reasons.add("acked key " + key + " is not one the driver writes");
                corrupt = true;
                continue;
            }
            try {
                byte[] got = zk.getData("/k" + i, false, null);
                if (!Arrays.equals(got, value(i, vsize))) {
                    reasons.add("acked znode /k" + i + " has a wrong value: "
                            + new String(got, StandardCharsets.UTF_8));
                    corrupt = true;
                }
            } catch (KeeperException.NoNodeException e) {
                reasons.add("acked znode /k" + i + " is missing");
                lost = true;
            }
        }
        for (String child : zk.getChildren("/", false)) {
            if (child.matches("k[0-9]+") && !begun.contains(child.substring(1))) {
                reasons.add("znode /" + child + " was never created by the workload");
                corrupt = true;
            }
        }
        if (corrupt) {
            return "corrupt-data";
        }
        return lost ? "lost-ack" : "pass";
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
            // where it was thrown, and the first ZooKeeper frame on the way (e.g. which part of
            // the start-up recovery read past the end of a file)
            StackTraceElement[] st = t.getStackTrace();
            if (st.length > 0) {
                sb.append(" (at ").append(frame(st[0]));
                for (StackTraceElement f : st) {
                    if (f != st[0] && f.getClassName().startsWith("org.apache.zookeeper.")) {
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
