// MindSpore Lite's quick_start_parallel_java flow (its Java concurrent-inference guide) against a Triton server: the same calls on
// mslite.triton.* instead of com.mindspore.*; the server comes from MSLITE_TRITON_URL (http://host:8000), or, with
// none set, is a `mslite-triton serve` the client starts for the run.
//
//   make java-client     # javac --release 17 -d client/java/build client/java/src/mslite/triton/*.java Main.java
//   MSLITE_TRITON_URL=http://127.0.0.1:8000 java -cp client/java/build Main examples/model/mobilenetv2.onnx \
//       examples/model/input.bin
//
// Arguments: MODEL (a local .onnx file to upload, or triton://NAME to bind to a repository model)
// [INPUT_BIN (float32 input; random data when absent)] [--threads N] [--tasks N] [--workers N] [--json]
// [--dump DIR (each output's raw little-endian bytes, as out_<thread>_<task>.bin)].
import mslite.triton.CpuBindMode;
import mslite.triton.DeviceType;
import mslite.triton.MSContext;
import mslite.triton.MSTensor;
import mslite.triton.ModelParallelRunner;
import mslite.triton.RunnerConfig;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;

public class Main {
    private static int threadNum = 5;
    private static int taskNum = 2;
    private static int workersNum = 2;
    private static boolean binaryData = true;
    private static Path dumpDir;
    private static byte[] inputData;

    public static void main(String[] args) throws Exception {
        List<String> positional = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--threads": threadNum = Integer.parseInt(args[++i]); break;
                case "--tasks": taskNum = Integer.parseInt(args[++i]); break;
                case "--workers": workersNum = Integer.parseInt(args[++i]); break;
                case "--json": binaryData = false; break;
                case "--dump": dumpDir = Paths.get(args[++i]); break;
                default: positional.add(args[i]);
            }
        }
        if (positional.isEmpty()) {
            System.err.println("usage: Main MODEL [INPUT_BIN] [--threads N] [--tasks N] [--workers N] [--json] [--dump DIR]");
            System.exit(2);
        }
        String modelPath = positional.get(0);
        if (positional.size() > 1) {
            inputData = Files.readAllBytes(Paths.get(positional.get(1)));
        }

        // use default param init context
        MSContext context = new MSContext();
        context.init(1, CpuBindMode.NO_BIND);
        boolean ret = context.addDeviceInfo(DeviceType.DT_CPU, false, 0);
        if (!ret) {
            System.err.println("init context failed");
            context.free();
            System.exit(1);
        }
        context.setBinaryData(binaryData);
        // init runner config
        RunnerConfig config = new RunnerConfig();
        config.init(context);
        config.setWorkersNum(workersNum);
        // init ModelParallelRunner
        ModelParallelRunner runner = new ModelParallelRunner();
        ret = runner.init(modelPath, config);
        if (!ret) {
            System.err.println("ModelParallelRunner init failed: " + runner.getLastError());
            runner.free();
            System.exit(1);
        }
        System.out.println("model: " + runner.getModelName());

        long start = System.currentTimeMillis();
        AtomicInteger failed = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < threadNum; t++) {
            final int threadId = t;
            threads.add(new Thread(() -> {
                for (int task = 0; task < taskNum; task++) {
                    if (!predictOnce(runner, threadId, task)) {
                        failed.incrementAndGet();
                    }
                }
            }));
        }
        threads.forEach(Thread::start);
        for (Thread t : threads) {
            t.join();
        }
        System.out.println("total time: " + (System.currentTimeMillis() - start) + " ms, failed: " + failed.get());
        // free memory
        runner.free();
        System.exit(failed.get() == 0 ? 0 : 1);
    }

    private static boolean predictOnce(ModelParallelRunner runner, int threadId, int task) {
        // get inputs: fresh tensors per call, so each thread fills its own
        List<MSTensor> inputs = runner.getInputs();
        for (MSTensor input : inputs) {
            if (!input.setData(inputData != null ? inputData : randomData(input.size()))) {
                System.err.println("set data failed for " + input);
                return false;
            }
        }
        List<MSTensor> outputs = new ArrayList<>();
        long begin = System.currentTimeMillis();
        if (!runner.predict(inputs, outputs)) {
            System.err.println("MindSpore Lite predict failed: " + runner.getLastError());
            return false;
        }
        long cost = System.currentTimeMillis() - begin;
        StringBuilder msg = new StringBuilder();
        msg.append("thread ").append(threadId).append(" task ").append(task).append(" predict time: ")
                .append(cost).append(" ms\n");
        for (MSTensor output : outputs) {
            float[] values = output.getFloatData();
            msg.append("tensor name is:").append(output.tensorName()).append(" tensor size is:").append(output.size())
                    .append(" tensor elements num is:").append(output.elementsNum()).append('\n');
            msg.append("output data is:");
            for (int i = 0; i < Math.min(5, values.length); i++) {
                msg.append(' ').append(values[i]);
            }
            msg.append('\n');
            if (dumpDir != null) {
                try {
                    Files.write(dumpDir.resolve("out_" + threadId + "_" + task + ".bin"), output.getByteData());
                } catch (java.io.IOException e) {
                    System.err.println("cannot write output: " + e);
                    return false;
                }
            }
        }
        System.out.print(msg);
        return true;
    }

    private static byte[] randomData(long size) {
        ByteBuffer b = ByteBuffer.allocate((int) size).order(ByteOrder.LITTLE_ENDIAN);
        Random random = new Random(threadSeed());
        while (b.remaining() >= 4) {
            b.putFloat(random.nextFloat());
        }
        return b.array();
    }

    private static long threadSeed() {
        return Thread.currentThread().getId();
    }
}
