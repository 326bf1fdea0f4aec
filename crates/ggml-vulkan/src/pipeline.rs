//! Compute pipelines: one shared descriptor-set layout (eight storage
//! buffers: src0, src1, src2, dst, src3, src4, src5, src6; SSM_SCAN reads
//! seven sources) and push-constant range for every shader, pipelines made
//! on first use from the shaders crate's SPIR-V.

use std::collections::HashMap;
use std::sync::Mutex;

use ash::vk;

use crate::error::{Error, Result, VkContext};

/// Storage-buffer bindings of every pipeline.
pub(crate) const N_BINDINGS: u32 = 8;
/// Bytes of push constants every pipeline accepts (the guaranteed minimum).
pub(crate) const PUSH_CONSTANT_BYTES: u32 = 128;

/// Pipelines of one shader, by specialization constants.
type Variants = Vec<(Vec<u32>, vk::Pipeline)>;

/// The pipeline layout and the pipelines made so far.
pub(crate) struct Pipelines {
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) layout: vk::PipelineLayout,
    cache: vk::PipelineCache,
    /// By shader name, then specialization constants.
    made: Mutex<HashMap<&'static str, Variants>>,
}

impl Pipelines {
    pub(crate) fn new(device: &ash::Device) -> Result<Pipelines> {
        let bindings: Vec<_> = (0..N_BINDINGS)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .size(PUSH_CONSTANT_BYTES)];
        // SAFETY: `device` is live; the create infos outlive the calls; on
        // failure the objects made so far are destroyed before returning.
        unsafe {
            let set_layout = device
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .ctx("vkCreateDescriptorSetLayout")?;
            let layouts = [set_layout];
            let layout = match device.create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default()
                    .set_layouts(&layouts)
                    .push_constant_ranges(&ranges),
                None,
            ) {
                Ok(l) => l,
                Err(e) => {
                    device.destroy_descriptor_set_layout(set_layout, None);
                    return Err(Error::vk("vkCreatePipelineLayout", e));
                }
            };
            let cache = device
                .create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
                .unwrap_or(vk::PipelineCache::null());
            Ok(Pipelines {
                set_layout,
                layout,
                cache,
                made: Mutex::new(HashMap::new()),
            })
        }
    }

    /// The pipeline of shader `name` with specialization constants `spec`
    /// (constant i = `spec[i]`), made on first use.
    pub(crate) fn get(
        &self,
        device: &ash::Device,
        name: &str,
        spec: &[u32],
    ) -> Result<vk::Pipeline> {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(_, p)) = made
            .get(name)
            .and_then(|v| v.iter().find(|(s, _)| s == spec))
        {
            return Ok(p);
        }
        let (key, code) = shaders::names()
            .find(|n| *n == name)
            .and_then(|n| shaders::get(n).map(|c| (n, c)))
            .ok_or_else(|| Error::MissingShader(name.to_string()))?;
        let words = ash::util::read_spv(&mut std::io::Cursor::new(code))
            .map_err(|e| Error::Other(format!("shader {name}: {e}")))?;
        // SAFETY: the SPIR-V comes from glslc for Vulkan 1.2; the module is
        // destroyed once the pipeline exists (or creation failed).
        unsafe {
            let module = device
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
                .ctx(&format!("vkCreateShaderModule({name})"))?;
            let entries: Vec<vk::SpecializationMapEntry> = (0..spec.len())
                .map(|i| vk::SpecializationMapEntry {
                    constant_id: i as u32,
                    offset: (4 * i) as u32,
                    size: 4,
                })
                .collect();
            let data: Vec<u8> = spec.iter().flat_map(|w| w.to_ne_bytes()).collect();
            let spec_info = vk::SpecializationInfo::default()
                .map_entries(&entries)
                .data(&data);
            let mut stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            if !spec.is_empty() {
                stage = stage.specialization_info(&spec_info);
            }
            let info = vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(self.layout);
            let res = device.create_compute_pipelines(self.cache, &[info], None);
            device.destroy_shader_module(module, None);
            let p =
                res.map_err(|(_, e)| Error::vk(format!("vkCreateComputePipelines({name})"), e))?[0];
            made.entry(key).or_default().push((spec.to_vec(), p));
            Ok(p)
        }
    }

    /// Destroys every object; the device must be idle.
    pub(crate) fn destroy(&self, device: &ash::Device) {
        let made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the device is idle, so no pipeline is in use; each object
        // is destroyed once.
        unsafe {
            for &(_, p) in made.values().flatten() {
                device.destroy_pipeline(p, None);
            }
            if self.cache != vk::PipelineCache::null() {
                device.destroy_pipeline_cache(self.cache, None);
            }
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
