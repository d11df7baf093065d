package mslite.triton;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;
import java.util.stream.Stream;

/**
 * The server of this program's own, started when no URL is set: {@code mslite-triton serve} as a child process
 * on free loopback ports with an empty model repository (models are uploaded into it), once per program.
 *
 * <p>It stops when the program ends: a shutdown hook stops it at a normal exit or on SIGTERM / Ctrl-C, and the
 * server watches its standard input ({@code --stop-on-stdin-close}), whose other end only this program holds,
 * so it also stops when the program is killed outright. The command is {@code MSLITE_TRITON_SERVE_CMD} (a
 * command line, split at spaces) or {@code mslite-triton} on PATH; the admin key is the one the server prints.
 */
final class LocalServer {
    private static final Logger LOG = Logger.getLogger(LocalServer.class.getName());
    private static final long START_TIMEOUT_S = 300; // tritonserver's start on a loaded two-core machine, with room
    private static final long STOP_TIMEOUT_S = 60;
    private static final String EXIT_TIMEOUT_S = "5"; // how long a stop waits for requests: none of ours are in flight
    // the lines `mslite-triton serve` prints once it serves (server/mslite_server/cli.py)
    private static final String HTTP_LINE = "HTTP ";
    private static final String KEY_LINE = "ADMIN KEY ";
    private static final String SERVING_LINE = "serving;";
    private static final String END_OF_OUTPUT = "\0"; // the reader thread's mark: the child closed its output

    private static LocalServer current; // guarded by LocalServer.class

    final String url;
    final String adminKey;
    private final Process process;
    private final Path repository;
    private final Path log;

    private LocalServer(String url, String adminKey, Process process, Path repository, Path log) {
        this.url = url;
        this.adminKey = adminKey;
        this.process = process;
        this.repository = repository;
        this.log = log;
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

    private static LocalServer start() throws KServeHttp.ServerError {
        String commandLine = Settings.get(Settings.SERVE_CMD_ENV);
        List<String> base = Arrays.asList(
                (commandLine == null ? Settings.DEFAULT_SERVE_CMD : commandLine).trim().split("\\s+"));
        List<String> command = new ArrayList<>(base);
        Path repository;
        Path log;
        try {
            repository = Files.createTempDirectory("mslite-triton-repo-");
            log = Files.createTempFile("mslite-triton-serve-", ".log");
        } catch (IOException e) {
            throw new KServeHttp.ServerError("kLiteError", "cannot start a server: " + e.getMessage());
        }
        command.addAll(List.of("serve", "--model-repository", repository.toString(), "--http-port", "0",
                "--grpc-port", "0", "--metrics-port", "0", "--exit-timeout-s", EXIT_TIMEOUT_S,
                "--stop-on-stdin-close"));
        Process process;
        try {
            ProcessBuilder builder = new ProcessBuilder(command).redirectError(log.toFile());
            // The server makes its own key and prints it (read below): a key in the environment is another
            // server's, and `serve` would take it as its own without printing it.
            builder.environment().remove(Settings.ADMIN_KEY_ENV);
            process = builder.start();
        } catch (IOException e) {
            remove(repository, log);
            throw new KServeHttp.ServerError("kLiteError", "no server: " + Settings.URL_ENV + " is not set, and '"
                    + base.get(0) + "', the command that starts one, cannot be run (" + e.getMessage() + "). "
                    + "Install mslite-triton with its server (pip install 'mslite-triton[server]') so that "
                    + Settings.DEFAULT_SERVE_CMD + " is on PATH, or name the command in " + Settings.SERVE_CMD_ENV
                    + ", or set " + Settings.URL_ENV + " to a running server's http://host:port");
        }
        BlockingQueue<String> lines = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> readLines(process, lines), "mslite-triton-serve-output");
        reader.setDaemon(true);
        reader.start();
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
                    String tail = tail(log);
                    remove(repository, log);
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
            remove(repository, log);
            throw new KServeHttp.ServerError("kLiteError", "interrupted while the server started");
        }
        LocalServer server = new LocalServer(url, key, process, repository, log);
        Runtime.getRuntime().addShutdownHook(new Thread(server::close, "mslite-triton-serve-stop"));
        LOG.info("started a server at " + url + " (log: " + log + "); it stops when this program ends");
        return server;
    }

    /** Stops the server and removes its repository and log (the shutdown hook). */
    private void close() {
        stop(process);
        remove(repository, log);
    }

    /** SIGTERM (the server lets requests in flight finish), then SIGKILL if it is still there. */
    private static void stop(Process process) {
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
    private static void readLines(Process process, BlockingQueue<String> lines) {
        try (BufferedReader out = new BufferedReader(
                new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line = out.readLine(); line != null; line = out.readLine()) {
                lines.add(line);
            }
        } catch (IOException e) {
            // the child went away: the mark below says so
        }
        lines.add(END_OF_OUTPUT);
    }

    private static String tail(Path log) {
        try {
            List<String> all = Files.readAllLines(log, StandardCharsets.UTF_8);
            return String.join("\n", all.subList(Math.max(0, all.size() - 15), all.size())).trim();
        } catch (IOException e) {
            return "(no log)";
        }
    }

    private static void remove(Path repository, Path log) {
        try (Stream<Path> walk = Files.walk(repository)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // already gone
        }
        log.toFile().delete();
    }
}
