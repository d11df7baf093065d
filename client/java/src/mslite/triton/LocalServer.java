package mslite.triton;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;

/**
 * The server of this program's own, started when no URL is set: {@code mslite-triton serve --private} as a child
 * process, once per program (mslite_contract/own_server.py says what such a server is). It makes its own empty
 * model repository (models are uploaded into it), picks free loopback ports, answers only requests with the admin
 * key it prints on its standard output (read here), and removes what it made when it stops.
 *
 * <p>It stops when the program ends: a shutdown hook stops it at a normal exit or on SIGTERM / Ctrl-C, and the
 * server stops once its standard input ends, whose other end only this program holds, so it also stops when the
 * program is killed outright. Nothing of the start is on disk on this side: the child's error output is read
 * here, its last lines kept to say why a start failed. The command: {@code MSLITE_TRITON_SERVE_CMD} (a command
 * line, split at spaces), else {@code mslite-triton} on PATH, else in {@code .venv/bin} of the current folder or
 * one above it (a checkout's virtual environment).
 */
final class LocalServer {
    private static final Logger LOG = Logger.getLogger(LocalServer.class.getName());
    private static final long START_TIMEOUT_S = 300; // tritonserver's start on a loaded two-core machine, with room
    private static final long STOP_TIMEOUT_S = 60;
    // mslite_contract/own_server.py: how the command is found and started, the lines it prints once it serves
    static final String SERVE_PROGRAM = "mslite-triton";
    static final String CHECKOUT_VENV_BIN = ".venv/bin";
    static final List<String> PRIVATE_ARGS = List.of("serve", "--private");
    static final String HTTP_LINE = "HTTP ";
    static final String KEY_LINE = "ADMIN KEY ";
    static final String SERVING_LINE = "serving;";
    private static final String END_OF_OUTPUT = "\0"; // the reader thread's mark: the child closed its output
    private static final int ERROR_LINES = 15; // of the child's error output, kept for a failed start's message

    private static LocalServer current; // guarded by LocalServer.class

    final String url;
    final String adminKey;
    private final Process process;

    private LocalServer(String url, String adminKey, Process process) {
        this.url = url;
        this.adminKey = adminKey;
        this.process = process;
    }

    /** This program's server, started on first use (and again if it has died since). */
    static synchronized LocalServer get() throws KServeHttp.ServerError {
        if (current != null && current.process.isAlive()) {
            return current;
        }
        if ("0".equals(Settings.get(Settings.AUTOSTART_ENV))) {
            throw new KServeHttp.ServerError("kLiteError", "no server: " + Settings.URL_ENV + " is not set and "
                    + Settings.AUTOSTART_ENV + "=0 turns starting one off");
        }
        current = start();
        return current;
    }

    /** The command that runs mslite-triton (the rule of mslite_contract/own_server.py), or null when none. */
    static List<String> findServeCommand() {
        String named = Settings.get(Settings.SERVE_CMD_ENV);
        if (named != null && !named.isBlank()) {
            return Arrays.asList(named.trim().split("\\s+"));
        }
        String path = System.getenv("PATH");
        for (String dir : (path == null ? "" : path).split(":")) {
            Path candidate = Paths.get(dir.isEmpty() ? "." : dir, SERVE_PROGRAM);
            if (Files.isRegularFile(candidate) && Files.isExecutable(candidate)) {
                return List.of(candidate.toString());
            }
        }
        for (Path dir = Paths.get("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
            Path candidate = dir.resolve(CHECKOUT_VENV_BIN).resolve(SERVE_PROGRAM);
            if (Files.isRegularFile(candidate) && Files.isExecutable(candidate)) {
                return List.of(candidate.toString());
            }
        }
        return null;
    }

    private static String notFound() {
        return "'" + SERVE_PROGRAM + "', the command that starts a server, was not found (not on PATH, nor in "
                + CHECKOUT_VENV_BIN + "/ of the current folder or one above it): install the mslite-triton package "
                + "with its server extra, name its command in " + Settings.SERVE_CMD_ENV + " (e.g. "
                + Settings.SERVE_CMD_ENV + "=/path/to/.venv/bin/" + SERVE_PROGRAM + "), or give a running server's "
                + "URL in " + Settings.URL_ENV;
    }

    private static LocalServer start() throws KServeHttp.ServerError {
        List<String> base = findServeCommand();
        if (base == null) {
            throw new KServeHttp.ServerError("kLiteError", "no server: " + Settings.URL_ENV + " is not set, and "
                    + notFound());
        }
        List<String> command = new ArrayList<>(base);
        command.addAll(PRIVATE_ARGS);
        Process process;
        try {
            ProcessBuilder builder = new ProcessBuilder(command);
            // The server makes its own key and prints it (read below): a key in the environment is another
            // server's, and `serve` would take it as its own without printing it.
            builder.environment().remove(Settings.ADMIN_KEY_ENV);
            process = builder.start();
        } catch (IOException e) {
            throw new KServeHttp.ServerError("kLiteError", "no server: " + Settings.URL_ENV + " is not set, and '"
                    + base.get(0) + "' cannot be run (" + e.getMessage() + "); " + notFound());
        }
        BlockingQueue<String> lines = new LinkedBlockingQueue<>();
        Deque<String> errors = new ArrayDeque<>();
        Thread reader = new Thread(() -> readLines(process.getInputStream(), lines), "mslite-triton-serve-output");
        reader.setDaemon(true);
        reader.start();
        Thread errorReader = new Thread(() -> keepLast(process.getErrorStream(), errors), "mslite-triton-serve-errors");
        errorReader.setDaemon(true);
        errorReader.start();
        String url = null;
        String key = null;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(START_TIMEOUT_S);
        try {
            while (true) {
                String line = lines.poll(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                if (line == null || END_OF_OUTPUT.equals(line)) {
                    String why = line == null ? "did not serve within " + START_TIMEOUT_S + " s"
                            : "exited before it served";
                    stop(process);
                    errorReader.join(TimeUnit.SECONDS.toMillis(5));
                    String tail;
                    synchronized (errors) {
                        tail = String.join("\n", errors);
                    }
                    throw new KServeHttp.ServerError("kLiteError", "the server started with '" + String.join(" ",
                            base) + " serve' " + why + ": " + tail);
                }
                if (line.startsWith(HTTP_LINE)) {
                    url = line.substring(HTTP_LINE.length()).trim();
                } else if (line.startsWith(KEY_LINE)) {
                    key = line.substring(KEY_LINE.length()).trim().split("\\s+")[0];
                } else if (line.startsWith(SERVING_LINE) && url != null) {
                    break;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            stop(process);
            throw new KServeHttp.ServerError("kLiteError", "interrupted while the server started");
        }
        LocalServer server = new LocalServer(url, key, process);
        Runtime.getRuntime().addShutdownHook(new Thread(server::close, "mslite-triton-serve-stop"));
        LOG.info("started a server at " + url + " (pid " + process.pid() + "); it stops when this program ends");
        return server;
    }

    /** Stops the server (the shutdown hook); it removes what it made. */
    private void close() {
        stop(process);
    }

    /** SIGTERM (the server lets requests in flight finish), then SIGKILL if it is still there. */
    private static void stop(Process process) {
        try {
            process.getOutputStream().close(); // the end of its input: it stops
        } catch (IOException e) {
            // it has gone already
        }
        process.destroy();
        try {
            if (!process.waitFor(STOP_TIMEOUT_S, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
    }

    /** Every line the child prints, then {@link #END_OF_OUTPUT}; keeps reading so the child never blocks. */
    private static void readLines(InputStream stream, BlockingQueue<String> lines) {
        try (BufferedReader out = new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))) {
            for (String line = out.readLine(); line != null; line = out.readLine()) {
                lines.add(line);
            }
        } catch (IOException e) {
            // the child went away: the mark below says so
        }
        lines.add(END_OF_OUTPUT);
    }

    /** The last {@link #ERROR_LINES} lines of the child's error output, read until it ends. */
    private static void keepLast(InputStream stream, Deque<String> kept) {
        try (BufferedReader in = new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))) {
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                synchronized (kept) {
                    kept.addLast(line);
                    if (kept.size() > ERROR_LINES) {
                        kept.removeFirst();
                    }
                }
            }
        } catch (IOException e) {
            // the child went away
        }
    }
}
