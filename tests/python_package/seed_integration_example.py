# The seed article's section 4.2 integration example, verbatim except its first two import
# lines (vllm -> optimate). tests/python_package/test_seed_example.py runs it on the embedded model.
from optimate import EngineArgs, LLMEngine
from optimate.sampling_params import SamplingParams
from optimate.optimizers import PrioritySchedulerOptimizer, PredictiveBatchingOptimizer # 假设的导入路径
from optimate.integration import create_optimized_engine # 假设的集成入口
import asyncio

async def main():
    # 1. 定义要使用的优化器列表
    optimizers = [
        PrioritySchedulerOptimizer(),
        PredictiveBatchingOptimizer(max_wait_time_ms=50), # 最大等待50毫秒以形成更好的批次
    ]

    # 2. 使用Optimate提供的工具创建优化后的引擎参数和引擎
    # 这步可能会封装对原始EngineArgs的增强
    engine_args = EngineArgs(
        model="meta-llama/Llama-2-7b-chat-hf",
        tensor_parallel_size=1,
        gpu_memory_utilization=0.9,
        max_num_seqs=256,
        max_model_len=4096,
        # Optimate可能会通过扩展参数或上下文传递优化器配置
        # 例如optimizers=optimizers
    )

    # 3. 创建优化后的引擎
    # 假设 create_optimized_engine 会处理优化器的注入
    engine = create_optimized_engine(engine_args, optimizers=optimizers)

    # 后续的请求处理逻辑与之前类似但调度和批处理行为已被优化器改变
    request_id = 0
    while True:
        prompt = "Hello, how are you?"
        sampling_params = SamplingParams(temperature=0.8, max_tokens=100)
        # 添加请求时可以附带优先级等扩展信息
        request_metadata = {"priority": 5} # 扩展的元数据
        engine.add_request(str(request_id), prompt, sampling_params, metadata=request_metadata)
        request_id += 1

        request_outputs = engine.step()
        for output in request_outputs:
            if output.finished:
                print(f"Request {output.request_id}: {output.outputs[0].text}")

        await asyncio.sleep(0.01)

if __name__ == "__main__":
    asyncio.run(main())
